"""`servesim calibrate` statistics (studies/calibrate.py docstring): the KV capacity is the
*median* KV in use while the pool limited admission, and the median over the runs that show one;
the plateau test compares the 10th and 90th percentiles; a round has settled only when *both*
scales moved less than 0.5 %; the decode step takes the DP sync off both TPOTs only when both are
above twice it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from servesim.studies import calibrate
from servesim.perf.calibration import Calibration
from servesim.measured.run import Measured


def _one_at_a_time(runs: list[tuple[int, float]]) -> Measured:
    """Requests all sent at 0 that run one after another, each holding its prompt (no output)
    for the given seconds: the KV in use is the running prompt, with a queue until the last."""
    starts = np.cumsum([0.0] + [d for _, d in runs[:-1]])
    ends = starts + np.array([d for _, d in runs])
    n = len(runs)
    return Measured("seq", "test", np.zeros(n), starts, ends, np.array([isl for isl, _ in runs]), np.zeros(n, dtype=int))


def test_the_kv_capacity_is_the_median_usage_while_bound():
    # While bound: 10,000 tokens for 6 s, 9,000 for 1 s, 8,000 for 1 s (p10 8,000 ≥ 0.75 × p90 10,000).
    # Median 10,000; the mean would be 9,625.
    measured = _one_at_a_time([(10_000, 3.0), (9_000, 1.0), (10_000, 3.0), (8_000, 1.0), (10_000, 0.5)])
    assert calibrate.measured_kv_tokens(measured, max_sequences=8, ranks=1) == 10_000
    assert calibrate.measured_kv_tokens(measured, max_sequences=8, ranks=2) == 5_000, "per rank"


def test_usage_that_wanders_below_the_plateau_shows_no_capacity():
    # 10th percentile 7,000 < 0.75 × 10,000: something else set the pace.
    measured = _one_at_a_time([(10_000, 3.0), (7_000, 1.0), (10_000, 3.0), (7_000, 1.0), (10_000, 0.5)])
    assert calibrate.measured_kv_tokens(measured, max_sequences=8, ranks=1) is None


def test_quartiles_inside_the_plateau_do_not_hide_a_wandering_tail():
    # 15 % of the bound time at 5,000 tokens: p10 is 5,000 (no plateau) though p25..p75 are flat.
    measured = _one_at_a_time([(10_000, 8.5), (5_000, 1.5), (10_000, 3.0)])
    assert calibrate.measured_kv_tokens(measured, max_sequences=8, ranks=1) is None


def test_the_capacity_over_runs_is_their_median(monkeypatch):
    shown = iter([10_000, None, 20_000, 90_000])
    monkeypatch.setattr(calibrate, "measured_kv_tokens", lambda *args: next(shown))
    replay = SimpleNamespace(runs=[object()] * 4, fits=[None] * 4, max_sequences=8, ranks=1)
    assert calibrate._kv_tokens(replay) == 20_000, "the median of 10k, 20k, 90k (the mean is 40k)"


@pytest.mark.parametrize(("after", "settled"), [
    ((1.004, 0.996), True), ((1.004, 1.2), False), ((1.2, 1.004), False), ((1.006, 1.0), False)])
def test_a_round_settles_when_both_scales_move_less_than_half_a_percent(after, settled):
    before = Calibration(prefill_scale=1.0, decode_scale=1.0)
    assert calibrate._settled(before, Calibration(prefill_scale=after[0], decode_scale=after[1])) is settled


def _replay(real_tpot: float, sim_tpot: float, sync: float) -> SimpleNamespace:
    return SimpleNamespace(run=lambda c: None, mean=lambda sim, metric: sim_tpot,
                           real={"tpot": np.array([real_tpot])}, sync_ms=sync)


def test_the_decode_step_scales_by_the_tpot_ratio_less_the_sync():
    current = Calibration(decode_scale=1.0)
    both_large = calibrate._fit_decode(_replay(12.0, 6.0, 2.0), current)
    assert both_large.decode_scale == pytest.approx((12.0 - 2.0) / (6.0 - 2.0))


def test_the_sync_is_kept_when_one_tpot_is_small():
    current = Calibration(decode_scale=1.0)
    one_small = calibrate._fit_decode(_replay(12.0, 3.0, 2.0), current)
    assert one_small.decode_scale == pytest.approx(12.0 / 3.0), "3 ms is not above twice the 2 ms sync"


@pytest.mark.parametrize(("scale", "clamped"), [(10.0, 5.0), (0.1, 0.2), (1.3, 1.3), (5.0, 5.0), (0.2, 0.2)])
def test_scales_stay_within_their_bounds(scale, clamped):
    assert calibrate._clamp(scale) == clamped


def test_the_prefill_bisection_converges_on_the_measured_mean():
    replay = SimpleNamespace(real={"ttft": np.array([150.0])}, run=lambda c: c,
                             mean=lambda sim, metric: 100.0 * sim.prefill_scale)
    found = calibrate._fit_prefill(replay, Calibration(prefill_scale=1.0), width=np.log(4.0))
    assert found.prefill_scale == pytest.approx(1.5, rel=0.05)


def test_a_full_batch_is_not_kv_bound():
    measured = _one_at_a_time([(10_000, 3.0), (9_000, 1.0), (10_000, 3.0), (8_000, 1.0), (10_000, 0.5)])
    assert calibrate.measured_kv_tokens(measured, max_sequences=1, ranks=1) is None, "one running = max_sequences"


@pytest.mark.parametrize("tolerance", [0.25, 0.5])
def test_a_move_of_exactly_the_tolerance_is_not_settled(monkeypatch, tolerance):
    """'Less than' the tolerance: exactly it is still a move. No double near 1 is 1.005 to the
    last bit, so the rule is pinned with a tolerance that is a power of two (exact in floats)."""
    monkeypatch.setattr(calibrate, "TOLERANCE", tolerance)
    before = Calibration(prefill_scale=2.0, decode_scale=2.0)
    moved = 2.0 * (1 + tolerance)
    just_inside = 2.0 * (1 + tolerance / 2)
    assert not calibrate._settled(before, Calibration(prefill_scale=moved, decode_scale=2.0))
    assert not calibrate._settled(before, Calibration(prefill_scale=2.0, decode_scale=moved))
    assert not calibrate._settled(before, Calibration(prefill_scale=2.0 * (1 - tolerance), decode_scale=2.0))
    assert calibrate._settled(before, Calibration(prefill_scale=just_inside, decode_scale=just_inside))


def test_the_settle_test_is_relative_to_the_scale_before():
    before = Calibration(prefill_scale=0.2, decode_scale=4.0)
    assert calibrate._settled(before, Calibration(prefill_scale=0.2009, decode_scale=4.019))
    assert not calibrate._settled(before, Calibration(prefill_scale=0.2011, decode_scale=4.0)), "0.55 % of 0.2"
    assert not calibrate._settled(before, Calibration(prefill_scale=0.2, decode_scale=4.021)), "0.525 % of 4"
