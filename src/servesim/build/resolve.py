"""Which fidelity model a run uses, decided once per config.

A role's `timing.mixed_pass` omitted means "resolve": under `compat: reference` the reference's
model (``sum``: a mixed pass is a prefill pass plus a decode pass, no front-end latency, no DP
step synchronisation, no async scheduling), otherwise servesim's best estimate for the role's
backend (`BEST_MIXED_PASS`; docs/timing.md, *Which model runs where*). Everything that derives
from the mode — front-end latency, DP sync, async scheduling (`servesim.build.apply`) — then
follows the resolved value. Only the data-backed kinds (default, roofline) have the key: fixed
and polynomial timing are the user's or the reference's formulas and always run as the
reference runs them.

`resolve_fidelity` is called where a config becomes a run (`servesim.build.lower`), by the
analytic estimate of `recommend` and by `calibrate`, so the three agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.config.schema import SimConfig, WorkerConfig

BEST_MIXED_PASS: dict[str, str] = {"vllm": "fused", "trtllm": "fused", "sglang": "fused"}
"""The mode servesim's defaults run per backend (docs/timing.md has the evidence per backend and GPU)."""

REFERENCE_MODE = "reference"
FUSED_MODE = "fused"


def resolved_mixed_pass(backend: str, compat: str | None) -> str:
    """`timing.mixed_pass` when the key is omitted."""
    if compat in ("reference", "upstream-0.13"):
        return "sum"  # both upstream builds time a mixed pass as its prefill plus its decode
    return BEST_MIXED_PASS.get(backend, "sum")


def _resolved_worker(worker: WorkerConfig, backend: str, compat: str | None) -> WorkerConfig:
    timing = worker.timing
    if not hasattr(timing, "mixed_pass") or timing.mixed_pass is not None:
        return worker
    mode = resolved_mixed_pass(backend, compat)
    return worker.model_copy(update={"timing": timing.model_copy(update={"mixed_pass": mode})})


def resolve_fidelity(config: SimConfig) -> SimConfig:
    """`config` with every role's omitted `timing.mixed_pass` resolved (idempotent). A config
    whose `compat: reference` contradicts an explicit fidelity key (one set after validation,
    e.g. by `model_copy`) is a ConfigError naming both."""
    from servesim.config.schema import compat_conflicts

    conflicts = compat_conflicts(config)
    if conflicts:
        raise ConfigError("; ".join(f"{key}: {message}" for key, message in conflicts))
    engine = config.engine
    workers = engine.workers
    update: dict[str, Any] = {}
    for role, worker in engine.roles.items():
        resolved = _resolved_worker(worker, engine.backend, config.compat)
        if resolved is not worker:
            update[role] = resolved
    if not update:
        return config
    engine = engine.model_copy(update={"workers": workers.model_copy(update=update)})
    return config.model_copy(update={"engine": engine})


def fidelity_mode(config: SimConfig) -> str:
    """The fidelity mode of a resolved config, for the provenance: 'reference' (the reference's
    timing model), 'fused' (servesim's best estimate) or 'mixed' (roles differ), with what was
    set explicitly."""
    modes = set()
    for worker in config.engine.roles.values():
        modes.add(getattr(worker.timing, "mixed_pass", None) or "sum")
    if modes == {"fused"}:
        return FUSED_MODE
    if modes == {"sum"}:
        return REFERENCE_MODE if config.compat == "reference" else "sum"
    return "mixed"


def default_backend_version(hardware: str, backend: str, systems_path: str | None) -> str | None:
    """`servesim.perf.aic.default_version` for a GPU and backend in the configured database
    (None: the database has no data for them, or cannot be read)."""
    from servesim.errors import RunError
    from servesim.perf import aic
    from servesim.perf.hardware import ready_systems_dir, systems_dir

    try:
        systems, how = systems_dir(systems_path)
        ready_systems_dir(systems, how, hardware, backend, None)
        return aic.default_version(systems, hardware, backend)
    except (RunError, ConfigError, OSError):
        return None


def resolve_backend_version(config: SimConfig) -> SimConfig:
    """`config` with an omitted `engine.backend_version` settled the way `recommend` settles it
    (`default_backend_version`), when a role is timed from the database; under `compat:
    reference`, or with the version given, unchanged."""
    from servesim.config.timing import DefaultTiming

    engine = config.engine
    if config.compat == "reference" or engine.backend_version is not None:
        return config
    if not any(isinstance(w.timing, DefaultTiming) for w in engine.roles.values()):
        return config
    version = default_backend_version(engine.hardware, engine.backend, engine.aic_systems_path)
    if version is None:
        return config
    return config.model_copy(update={"engine": engine.model_copy(update={"backend_version": version})})


def provenance(config: SimConfig, timing_labels: dict[str, str]) -> dict[str, str]:
    """What a run resolved, as flat text (`Report.provenance`, prediction.json's `provenance`,
    the ledger, the table's header): backend and version, timing model per role, fidelity mode,
    calibration, servesim version, compat. `config` is resolved (`resolve_fidelity`,
    `resolve_backend_version`); `timing_labels` are the roles' built timing models' labels."""
    from servesim.version import __version__
    from servesim.config.timing import DefaultTiming

    engine = config.engine
    version = engine.backend_version or "none (no database timing)"
    if engine.backend_version is None and any(isinstance(w.timing, DefaultTiming) for w in engine.roles.values()):
        from servesim.perf.aicdata import DEFAULT_BACKEND_VERSIONS

        version = DEFAULT_BACKEND_VERSIONS.get(engine.backend, "current")
    calibrations = sorted({c for w in engine.roles.values() if (c := getattr(w.timing, "calibration", None))})
    timing = timing_labels.get("aggregated") if len(timing_labels) == 1 else "; ".join(
        f"{role}: {label}" for role, label in timing_labels.items())
    return {"servesim_version": __version__, "compat": config.compat or "none", "backend": engine.backend,
            "backend_version": version, "hardware": engine.hardware, "timing_model": timing or "",
            "fidelity": fidelity_mode(config), "calibration": ", ".join(calibrations) or "none"}


def header_line(prov: dict[str, str]) -> str:
    """The one-line header above the text table."""
    return (f"servesim {prov['servesim_version']} · {prov['backend']} {prov['backend_version']} on "
            f"{prov['hardware']} · fidelity: {prov['fidelity']} · timing: {prov['timing_model']} · "
            f"calibration: {prov['calibration']}\n")
