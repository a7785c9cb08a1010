"""Power and energy (issue 34): `power_w`, `power_coverage` and servesim's
`energy_per_output_token_j`, checked against AISimulate 0.13's recorded runs
(`tests/cases/upstream013/power.json`, recorded by
`benchmarks/record_013_power_prefix_intervals.py`; the reference is never run here)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
from cases013 import AIC_REL, recorded, run

from servesim import simulate
from servesim.config.load import parse_config
from servesim.perf.energy import (
    COVERAGE_GATE,
    EnergyMeter,
    PhaseTotals,
    PoolEnergy,
    ShapeEnergy,
    power_fields,
    unavailable_reason,
)
from servesim.report.render import render_table

POWER = recorded("power")["cases"]
UPSTREAM_SYSTEMS = Path(os.environ.get("SERVESIM_REFERENCE_HOME", Path.home() / ".cache" / "servesim-reference")) / \
    "dynamo" / "lib" / "python3.11" / "site-packages" / "aisimulate_core" / "systems"


def _ops(phase: dict[str, Any]) -> list[tuple[str, float, float, str]]:
    """0.13's per-op records as AIC per-op tuples (name, latency, energy, source)."""
    return [(op["name"], op["latency_ms"], op.get("energy_wms", 0.0), op["source"]) for op in phase["operations"]]


@pytest.mark.parametrize("name", [n for n in POWER if POWER[n]["power_diagnostics"]["phases"]])
def test_phase_power_is_energy_over_latency_of_its_ops_as_in_013(name: str) -> None:
    """Each phase's power and coverage follow from its operations exactly as servesim prices a
    pass shape: energy / latency, and the latency of the ops with positive energy / latency."""
    for phase in POWER[name]["power_diagnostics"]["phases"]:
        shape = ShapeEnergy.of_ops(_ops(phase))
        assert shape.latency_ms == pytest.approx(phase["latency_ms"], rel=1e-12)
        if not phase["latency_ms"]:
            continue  # a phase that never ran (prefill-only passes have no decode phase)
        assert shape.covered_ms / shape.latency_ms == pytest.approx(phase["power_coverage"], rel=1e-12)
        if phase["power_w"] is not None:
            assert shape.energy_wms / shape.latency_ms == pytest.approx(phase["power_w"], rel=1e-12)


class _Priced:
    """An energy source answering recorded phase totals (one shape per phase)."""

    def __init__(self, prefill: ShapeEnergy, decode: ShapeEnergy) -> None:
        self._prefill, self._decode = prefill, decode

    def prefill(self, batch: int, isl: int, prefix: int) -> ShapeEnergy:
        return self._prefill

    def decode(self, batch: int, ctx: int) -> ShapeEnergy:
        return self._decode


@pytest.mark.parametrize("name", sorted(POWER))
def test_run_power_and_gate_match_013(name: str) -> None:
    """The run's fields from its phases: Σ energy / Σ latency, published only at coverage >=
    0.9 (0.13's `power_w`, `power_coverage`); no phases (no timing provider): both null."""
    case = POWER[name]
    diagnostics = case["power_diagnostics"]
    if diagnostics["publication_status"] == "unsupported":
        fields = power_fields([PoolEnergy(None, 1.0, 1)], case["total_output_tokens"])
        assert (fields["power_w"], fields["power_coverage"]) == (case["power_w"], case["power_coverage"]) == (None, None)
        assert unavailable_reason(fields) == "energy provider or topology unsupported"
        return
    phases = {p["name"]: ShapeEnergy.of_ops(_ops(p)) for p in diagnostics["phases"]}
    empty = ShapeEnergy(0.0, 0.0, 0.0)
    meter = EnergyMeter(None, _Priced(phases.get("prefill", empty), phases.get("decode", empty)))  # type: ignore[arg-type]
    meter.prefill_ms[(1, 1, 0)] = phases.get("prefill", empty).latency_ms
    meter.decode_ms[(1, 1)] = phases.get("decode", empty).latency_ms
    fields = power_fields([PoolEnergy(meter, 1.0, 1)], case["total_output_tokens"])
    assert fields["power_coverage"] == pytest.approx(case["power_coverage"], rel=1e-12, abs=1e-15)
    if case["power_w"] is None:
        assert fields["power_w"] is None and case["power_coverage"] < COVERAGE_GATE
    else:
        assert fields["power_w"] == pytest.approx(case["power_w"], rel=1e-12)


def _run(config: dict[str, Any], **engine: Any) -> dict[str, Any]:
    """servesim's report of a recorded config under 0.13's pass convention."""
    return run(config, **engine)


@pytest.mark.parametrize("name", ["fixed-timing", "polynomial-timing", "aic-no-power-data"])
def test_fields_match_013_where_the_database_has_no_power(name: str) -> None:
    """Roles without a timing provider: null, null; AIC without op power data: 0.0, null."""
    case = POWER[name]
    report = _run(case["config"])
    assert (report["power_w"], report["power_coverage"]) == (case["power_w"], case["power_coverage"])
    assert report["energy_per_output_token_j"] is None


def test_compat_reference_report_has_no_power_fields() -> None:
    config = copy.deepcopy(POWER["fixed-timing"]["config"])
    config["compat"] = "reference"
    assert "power_w" not in simulate(parse_config(config)).to_dict()


def test_table_prints_power_rows_with_013_wording() -> None:
    """Without power data one row says why; with partial coverage all three rows show."""
    table = render_table(_run(POWER["fixed-timing"]["config"]), "out/prediction.json")
    assert "Active Power per GPU (W) [power_w]" in table
    assert "unavailable (energy provider or topology unsupported)" in table
    assert "Power Data Coverage (%) [power_coverage]" not in table
    assert "Energy per Output Token (J) [energy_per_output_token_j]" not in table
    report = {**_run(POWER["fixed-timing"]["config"]), "power_coverage": 0.5}
    table = render_table(report, "out/prediction.json")
    assert "Power Data Coverage (%) [power_coverage]" in table
    assert "unavailable (insufficient energy coverage)" in table
    assert "Energy per Output Token (J) [energy_per_output_token_j]" in table


def test_metered_totals_scale_each_shape_to_the_pass_time() -> None:
    """A pass timed longer than AIC's latency (calibration, DP sync) keeps the shape's power."""
    meter = EnergyMeter(None, _Priced(ShapeEnergy(10.0, 7000.0, 9.0), ShapeEnergy(2.0, 1000.0, 2.0)))  # type: ignore[arg-type]
    meter.prefill_ms[(1, 1, 0)] = 20.0
    meter.decode_ms[(1, 1)] = 2.0
    totals = meter.totals()
    assert totals["prefill"] == PhaseTotals(20.0, 14000.0, 18.0)
    assert totals["decode"] == PhaseTotals(2.0, 1000.0, 2.0)
    fields = power_fields([PoolEnergy(meter, 30.0, 2)], 3)
    assert fields["power_w"] == pytest.approx(15000.0 / 22.0)
    assert fields["power_coverage"] == pytest.approx(20.0 / 22.0)
    assert fields["energy_per_output_token_j"] == pytest.approx(15000.0 / 22.0 * 60.0 / 1000.0 / 3)


needs_upstream_db = pytest.mark.skipif(not UPSTREAM_SYSTEMS.is_dir(), reason="0.13's AIC database not installed")


@needs_upstream_db
@pytest.mark.parametrize("name", ["aic-b200-trtllm", "aic-b200-trtllm-prefill-only"])
def test_power_equals_013_on_its_database(name: str) -> None:
    """On 0.13's own database, under 0.13's pass convention: servesim's power, coverage, energy
    per token and duration equal 0.13's — prefill-only passes, and decode steps whose
    `generation_attention` carries 0.13's Q/K-norm latency without energy (docs/timing.md)."""
    case = POWER[name]
    report = _run(case["config"], aic_systems_path=str(UPSTREAM_SYSTEMS))
    assert report["power_w"] == pytest.approx(case["power_w"], rel=1e-7)
    assert report["power_coverage"] == pytest.approx(case["power_coverage"], rel=1e-7)
    assert report["duration_ms"] == pytest.approx(case["duration_ms"], rel=AIC_REL)
    energy_j = case["power_diagnostics"]["energy_wms"] / 1000.0
    # servesim's busy time is the passes' durations in whole nanoseconds (0.13 sums raw latencies)
    assert report["energy_per_output_token_j"] == pytest.approx(energy_j / case["total_output_tokens"], rel=1e-7)


@needs_upstream_db
def test_reference_decode_timing_draws_more_power_than_013() -> None:
    """Without the switch servesim keeps 0.1.0.dev2's decode timing: a shorter attention op
    with the same energy, so more power than 0.13 reports."""
    case = POWER["aic-b200-trtllm"]
    report = run(case["config"], compat=None, aic_systems_path=str(UPSTREAM_SYSTEMS))
    assert report["power_w"] > case["power_w"] * 1.05


def test_tables_without_a_power_column_price_nothing(tmp_path: Path) -> None:
    """The database check that spares compiling an engine whose tables have no op power: a
    version's own tables and those it reuses count; each file's schema is read from its footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from servesim.perf.energy import power_data_possible

    data = tmp_path / "data" / "gpu"
    for op, version, columns in (("gemm", "1.0", ["latency"]), ("gemm", "0.9", ["latency", "power"]),
                                 ("gemm", "2.0", ["latency", "power_limit"])):
        (data / op / "vllm" / version).mkdir(parents=True)
        pq.write_table(pa.table({c: [1.0] for c in columns}), data / op / "vllm" / version / "gemm_perf.parquet")
    assert power_data_possible(str(tmp_path), "gpu", "vllm", "0.9")
    assert not power_data_possible(str(tmp_path), "gpu", "vllm", "1.0")
    assert not power_data_possible(str(tmp_path), "gpu", "vllm", "2.0")  # power_limit is not power
    (data / "gemm" / "vllm" / "2.0" / "reuse.yaml").write_text("reuse:\n- {table: gemm_perf, from_version: '0.9'}\n")
    from servesim.perf import energy

    energy._POWER_DATA.clear()  # the answers are memoised per process
    assert power_data_possible(str(tmp_path), "gpu", "vllm", "2.0")


class _Plain:
    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        return 10.0

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        return 2.0


class _Series(_Plain):
    def decode_series(self, batch: int, active: range, total_kv_tokens: int) -> list[float]:
        return [2.0 + a / 1000 for a in active]


class _Mixed(_Plain):
    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, decode_batch: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        return 11.0


def test_meter_keeps_exactly_the_optional_answers_of_the_model() -> None:
    """The engine picks its paths by what a timing model answers (`decode_series`, `mixed`): a
    metered model answers the same, and meters each answer under its shape."""
    from servesim.engine.pass_time import MixedPassTiming
    from servesim.perf.energy import make_meter

    plain, series, mixed = make_meter(_Plain(), None), make_meter(_Series(), None), make_meter(_Mixed(), None)
    assert getattr(plain, "decode_series", None) is None and not isinstance(plain, MixedPassTiming)
    assert series.decode_series(2, range(100, 106, 2), 0) == [2.1, 2.102, 2.104]  # type: ignore[attr-defined]
    assert dict(series.decode_ms) == {(2, 50): 2.1, (2, 51): 2.102, (2, 52): 2.104}
    assert isinstance(mixed, MixedPassTiming) and getattr(mixed, "decode_series", None) is None
    assert mixed.mixed(1, 100, 0, 3, 30, 10, 0) == 11.0
    assert dict(mixed.mixed_ms) == {(1, 100, 0, 3, 10): 11.0}
    assert plain.prefill(1, 100, 0) == 10.0 and plain.decode(1, 7, 7, 0) == 2.0
    assert dict(plain.prefill_ms) == {(1, 100, 0): 10.0} and dict(plain.decode_ms) == {(1, 7): 2.0}
