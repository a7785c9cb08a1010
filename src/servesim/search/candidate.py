"""From a point of the space to a complete `predict` config, and why a point cannot run.

`Materializer.prepare` turns a `Candidate` into the mapping written as `recommendations/NNNN.yaml`
(every default resolved the way the reference resolves it: the newest database version, the
model's context length, the backend's block size and memory fraction) and checks it *before*
any replay:

* ``over_budget``  — the candidate's GPUs fall outside [min_candidate_gpus, max_candidate_gpus];
* ``unsupported``  — the shape does not divide the model (heads, MoE width, FP8 blocks), or the
  `predict` schema refuses the combination (TRT-LLM disaggregated, attention DP when
  disaggregated, block size 1 on vLLM ...);
* ``kv_too_small`` — weights and activations leave no KV budget, or a rank's KV pool cannot
  hold one sequence of the context length (the reference's rule for a viable shape).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.config import SimConfig, parse_config, runtime_rejections
from servesim.errors import ConfigError, RunError
from servesim.search import facts
from servesim.search.planner_domains import GROUP_KEYS, GROUPS
from servesim.search.schema import ROUTER_KV_KNOBS, Choices, Range, RecommendConfig, WorkerDomains
from servesim.search.space import ROLE_DEFAULTS, Candidate, Shape

DEFAULT_TRAFFIC = {"source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 128},
                   "load": {"type": "concurrency", "concurrency": 10}, "stop": {"requests": 100}}
DEFAULT_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}
DEFAULT_MEMORY_FRACTION = {"vllm": 0.9, "sglang": 0.88, "trtllm": 0.9}


@dataclass
class Prepared:
    """A candidate ready to replay (`status` 'ok') or rejected before any replay (with a reason)."""

    candidate: Candidate
    config: dict[str, Any] | None
    status: str
    reason: str | None = None
    parsed: SimConfig | None = None
    """`config` as the predict schema parsed it (for the analytic estimate)."""


class Materializer:
    """Builds and checks the concrete config of each candidate of one recommend config."""

    def __init__(self, cfg: RecommendConfig, base_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.engine = cfg.engine
        self.hardware = cfg.hardware
        self.model = self._absolute(cfg.engine.model, base_dir, must_exist=True)
        self.context_length = (cfg.engine.context_length if cfg.engine.context_length != "max"
                               else facts.context_length(self.model))
        self.systems_path = self._absolute(cfg.engine.aic_systems_path, base_dir)
        self.base_dir = base_dir
        self.traffic = self._traffic_template(base_dir)
        self._versions: dict[str, str | None] = {}

    # -- the config ------------------------------------------------------------------------

    def config(self, cand: Candidate, load_value: Any = None) -> dict[str, Any]:
        """The complete `predict` mapping of a candidate (traffic, engine, evaluation, ...)."""
        engine: dict[str, Any] = {"mode": cand.mode, "model": self.model, "hardware": self.hardware,
                                  "backend": cand.backend}
        version = self.backend_version(cand.backend)
        if version is not None:
            engine["backend_version"] = version
        if self.systems_path is not None:
            engine["aic_systems_path"] = self.systems_path
        engine["context_length"] = self.context_length
        engine["workers"] = {role: self._worker(cand, role) for role, _ in cand.shapes}
        if cand.mode == "disaggregated" and self.engine.kv_transfer is not None:
            engine["kv_transfer"] = dict(self.engine.kv_transfer)
        out: dict[str, Any] = {"traffic": self._traffic(cand, load_value), "engine": engine}
        if self.cfg.compat is not None:
            out["compat"] = self.cfg.compat
        if self.cfg.evaluation:
            out["evaluation"] = copy.deepcopy(self.cfg.evaluation)
        if self.cfg.router is not None:
            out["router"] = self._router(cand)
        if self.cfg.planner is not None:
            out["planner"] = self._planner(cand)
        return out

    def _planner(self, cand: Candidate) -> dict[str, Any]:
        """The candidate's `planner:` section: `policy: disabled`, or enabled with its scaling
        policy's keys, the fpm_sampling and load_predictor presets' only with throughput scaling,
        load_sensitivity's only with load scaling, and the section's other keys as written."""
        planner = self.cfg.planner
        assert planner is not None
        knobs = cand.flat_knobs()
        if knobs["planner.policy"] == "disabled":
            return {"policy": "disabled"}
        presets = planner.presets()
        out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in (planner.model_extra or {}).items()
                               if not any(k in keys for keys in GROUP_KEYS.values())}
        out["policy"] = "enabled"
        out["target"] = self.cfg.planner_target
        for group in GROUPS:
            if f"planner.{group}" in knobs:
                out.update(presets[group][knobs[f"planner.{group}"]])
        for key in ("min_workers", "prefill_min_workers", "decode_min_workers"):
            if knobs.get(f"planner.{key}") is not None:
                out[key] = knobs[f"planner.{key}"]
        return out

    def _router(self, cand: Candidate) -> dict[str, Any]:
        """The candidate's `router:` section: its policy, the KV-router knobs only for kv_router,
        and the section's other keys as written."""
        assert self.cfg.router is not None
        router: dict[str, Any] = copy.deepcopy(self.cfg.router.model_extra or {})
        router["policy"] = cand.knob("router.policy")
        if router["policy"] == "kv_router":
            router["prefill_load_model"] = {"type": cand.knob("router.prefill_load_model.type")}
            router.update({knob: float(cand.knob(f"router.{knob}")) for knob in ROUTER_KV_KNOBS})
        return router

    def backend_version(self, backend: str) -> str | None:
        """The configured version, else the database's newest for this GPU (as the reference)."""
        if self.engine.backend_version is not None:
            return self.engine.backend_version
        if backend not in self._versions:
            if self.cfg.compat == "reference":  # the reference writes the database's newest
                self._versions[backend] = facts.latest_backend_version(self.hardware, backend, self.systems_path)
            else:  # the version predict resolves (servesim.perf.aic.default_version)
                from servesim.build.resolve import default_backend_version

                self._versions[backend] = default_backend_version(self.hardware, backend, self.systems_path)
        return self._versions[backend]

    def _worker(self, cand: Candidate, role: str) -> dict[str, Any]:
        base = f"engine.workers.{role}"
        return self._worker_mapping(role, cand.backend, cand.shape(role), lambda key, default=None:
                                    cand.knob(f"{base}.{key}", default))

    def _worker_mapping(self, role: str, backend: str, shape: Shape, knob: Any) -> dict[str, Any]:
        """One role's worker section; `knob(key, default)` gives the chosen value of a knob."""
        given: WorkerDomains = getattr(self.engine.workers, role)
        scheduler: dict[str, Any] = {"max_batched_tokens": knob("scheduler.max_batched_tokens"),
                                     "max_sequences": knob("scheduler.max_sequences")}
        for key in ("sglang", "preemption_mode"):
            if getattr(given.scheduler, key) is not None:
                scheduler[key] = copy.deepcopy(getattr(given.scheduler, key))
        if given.kv_cache.capacity.type == "fixed":
            capacity: dict[str, Any] = {"type": "fixed", "blocks": given.kv_cache.capacity.blocks}
        else:
            capacity = {"type": "default",
                        "memory_fraction": knob("kv_cache.capacity.memory_fraction", DEFAULT_MEMORY_FRACTION[backend])}
        worker: dict[str, Any] = {
            "parallelism": shape.as_dict(),
            "scheduler": scheduler,
            "kv_cache": {"block_size": knob("kv_cache.block_size", DEFAULT_BLOCK_SIZE[backend]),
                         "prefix_caching": given.kv_cache.prefix_caching, "capacity": capacity},
            "timing": self._timing(given.timing),
            "startup_seconds": given.startup_seconds,
        }
        if given.speculative is not None:
            worker["speculative"] = copy.deepcopy(given.speculative)
        return worker

    def _timing(self, given: dict[str, Any] | None) -> dict[str, Any]:
        """A role's timing section as given (a calibration file's path made absolute)."""
        timing = copy.deepcopy(given) if given is not None else {"type": "default"}
        if isinstance(timing.get("calibration"), str):
            timing["calibration"] = self._absolute(timing["calibration"], self.base_dir)
        return timing

    def shape_can_serve(self, backend: str, role: str, shape: Shape) -> bool:
        """Whether a split divides the model and, with the role's most generous settings (fewest
        batched tokens, largest memory fraction), leaves a KV pool above the context length."""
        if facts.shape_problem(self.model, shape.tensor, shape.pipeline, shape.attention_data,
                               shape.moe_tensor, shape.moe_expert):
            return False
        given: WorkerDomains = getattr(self.engine.workers, role)
        generous = {"scheduler.max_batched_tokens": int(min(_values(given.scheduler.max_batched_tokens)
                                                            or ROLE_DEFAULTS["max_batched_tokens"][role])),
                    "scheduler.max_sequences": int(min(_values(given.scheduler.max_sequences)
                                                       or ROLE_DEFAULTS["max_sequences"][role])),
                    "kv_cache.capacity.memory_fraction": max(_values(given.kv_cache.capacity.memory_fraction)
                                                             or (DEFAULT_MEMORY_FRACTION[backend],)),
                    "kv_cache.block_size": int(min(_values(given.kv_cache.block_size)
                                                   or (DEFAULT_BLOCK_SIZE[backend],)))}
        worker = self._worker_mapping(role, backend, shape, lambda key, default=None: generous.get(key, default))
        engine = {"mode": "aggregated", "model": self.model, "hardware": self.hardware, "backend": backend,
                  "context_length": self.context_length, "workers": {"aggregated": worker}}
        if self.systems_path is not None:
            engine["aic_systems_path"] = self.systems_path
        if self.backend_version(backend) is not None:
            engine["backend_version"] = self.backend_version(backend)
        try:
            mapping: dict[str, Any] = {"engine": engine}
            if self.cfg.compat is not None:
                mapping["compat"] = self.cfg.compat
            return facts.kv_tokens_per_rank(parse_config(mapping), "aggregated") > self.context_length
        except (ConfigError, RunError):
            return False

    def _traffic(self, cand: Candidate, load_value: Any) -> dict[str, Any]:
        traffic = copy.deepcopy(self.traffic)
        load = traffic["load"]
        key = next((k for k in ("concurrency", "requests_per_second", "sessions_per_second", "fraction", "speedup")
                    if k in load), None)
        if load["type"] == "kv_capacity_fraction":
            traffic["load"] = {"type": "concurrency", "concurrency": load_value}
        elif key is not None:
            load[key] = cand.knob(f"traffic.load.{key}", load[key])
        return traffic

    def _traffic_template(self, base_dir: Path | None) -> dict[str, Any]:
        """The traffic section with trace paths made absolute; load domains stay for `_traffic`."""
        if self.cfg.traffic is None:
            return copy.deepcopy(DEFAULT_TRAFFIC)
        given = self.cfg.traffic
        source = copy.deepcopy(given.source)
        if source.get("type") == "trace" and isinstance(source.get("paths"), list):
            source["paths"] = [self._absolute(p, base_dir) if isinstance(p, str) else p for p in source["paths"]]
        load = given.load.model_dump(exclude_none=True)
        out: dict[str, Any] = {"source": source, "load": load}
        if given.stop is not None:
            out["stop"] = copy.deepcopy(given.stop)
        return out

    @staticmethod
    def _absolute(path: str | None, base_dir: Path | None, must_exist: bool = False) -> Any:
        """`path` against the config's folder when it names something there (else unchanged)."""
        if path is None or base_dir is None or os.path.isabs(path):
            return path
        candidate = base_dir / path
        return str(candidate) if (os.path.exists(candidate) or not must_exist) else path  # False on any OSError

    # -- checks ----------------------------------------------------------------------------

    def prepare(self, cand: Candidate, unsupported: str | None = None) -> Prepared:
        """The candidate's config, or the reason it cannot run (checked without replaying);
        `unsupported` is a reason found by the caller (reported after the budget check)."""
        reason = self._budget_problem(cand)
        if reason:
            return Prepared(cand, None, "over_budget", reason)
        if unsupported:
            return Prepared(cand, None, "unsupported", unsupported)
        for role, shape in cand.shapes:
            problem = facts.shape_problem(self.model, shape.tensor, shape.pipeline, shape.attention_data,
                                          shape.moe_tensor, shape.moe_expert)
            if problem:
                return Prepared(cand, None, "unsupported", f"{role}: {problem}")
        kv_fraction = self.traffic["load"]["type"] == "kv_capacity_fraction"
        mapping = self.config(cand, load_value=1 if kv_fraction else None)
        try:
            parsed = parse_config(mapping)
        except ConfigError as exc:
            return Prepared(cand, None, "unsupported", " ".join(str(exc).split()))
        problems = runtime_rejections(parsed)
        if problems:
            return Prepared(cand, None, "unsupported", "; ".join(problems))
        tokens: dict[str, int] = {}
        for role, _ in cand.shapes:
            try:
                tokens[role] = facts.kv_tokens_per_rank(parsed, role)
            except RunError as exc:
                return Prepared(cand, None, "kv_too_small", f"{role}: {str(exc).split(';')[0]}")
            if tokens[role] <= self.context_length:
                return Prepared(cand, None, "kv_too_small",
                                f"{role}: a rank's KV pool ({tokens[role]} tokens) cannot hold one "
                                f"{self.context_length}-token sequence (context_length)")
        resolved = False
        if kv_fraction:
            concurrency = self._kv_fraction_concurrency(cand, tokens)
            if isinstance(concurrency, str):
                return Prepared(cand, None, "kv_too_small", concurrency)
            mapping, resolved = self.config(cand, load_value=concurrency), True
        if cand.mode == "disaggregated" and isinstance(mapping["engine"].get("kv_transfer"), dict) \
                and mapping["engine"]["kv_transfer"].get("bytes_per_token", "auto") == "auto":
            mapping["engine"]["kv_transfer"]["bytes_per_token"] = max(
                facts.kv_bytes_per_token(parsed, role) for role in ("prefill", "decode"))
            resolved = True
        return Prepared(cand, mapping, "ok", parsed=parse_config(mapping) if resolved else parsed)

    def _budget_problem(self, cand: Candidate) -> str | None:
        constraints = self.cfg.optimization.constraints
        used = cand.used_gpus
        if used > constraints.max_candidate_gpus:
            return f"used_gpus={used} > max_candidate_gpus={constraints.max_candidate_gpus}"
        low = constraints.min_candidate_gpus
        if low is not None and used < low:
            return f"used_gpus={used} < min_candidate_gpus={low}"
        return None

    def _kv_fraction_concurrency(self, cand: Candidate, tokens: dict[str, int]) -> int | str:
        """`kv_capacity_fraction` load: the fraction of the requests the load role's KV pools
        hold at once, each request taking input + output/2 tokens on average (the reference's
        rule); the pools are every attention-DP rank of every replica."""
        role = "decode" if cand.mode == "disaggregated" else "aggregated"
        shape = cand.shape(role)
        pool = tokens[role] * shape.attention_data * shape.replicas
        source = self.traffic["source"]
        if source.get("type") == "synthetic-session":
            isl, osl = source.get("new_input_tokens_per_turn", 1024), source.get("output_tokens_per_turn", 128)
        else:
            isl, osl = source.get("input_tokens", 1024), source.get("output_tokens", 128)
        capacity = pool // (isl + osl // 2)
        if capacity < 1:
            return f"{role}: the KV pools ({pool} tokens) cannot hold one request of {isl + osl // 2} tokens"
        fraction = cand.knob("traffic.load.fraction", self.traffic["load"].get("fraction"))
        return max(1, int(float(fraction) * capacity))


def _values(domain: Any) -> tuple[Any, ...]:
    """The values a domain spans (its bounds for a range); () when the key is not given."""
    if domain is None:
        return ()
    if isinstance(domain, Choices):
        return tuple(domain.choices)
    if isinstance(domain, Range):
        return (domain.range.min, domain.range.max)
    return (domain,)
