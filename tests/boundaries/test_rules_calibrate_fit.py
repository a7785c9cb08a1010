"""Rules of `servesim calibrate`'s searches and KV statistic (studies/calibrate.py): the
golden-section search on log(prefill scale) keeps the better half and returns the best trial
with its front-end latency; both searches stay within ±width of the current scale and within
the scale bounds; the KV pool's busy time counts every instant with a request running *or*
waiting (a queue with nothing running is busy too)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from servesim.measured.run import Measured
from servesim.perf.calibration import Calibration
from servesim.studies import calibrate, separate


def _golden(monkeypatch, best_scale: float, current: float = 1.0, width: float = 0.5) -> tuple[Calibration, list]:
    """Run the golden-section search on a misfit (log a − log best)², front-end 10·a ms."""
    trials: list[float] = []

    def misfit(replay, sim):
        trials.append(sim.prefill_scale)
        assert sim.frontend_ms == 0.0, "trials are simulated without front-end latency"
        return 10.0 * sim.prefill_scale, (math.log(sim.prefill_scale) - math.log(best_scale)) ** 2

    monkeypatch.setattr(separate, "frontend_and_misfit", misfit)
    replay = SimpleNamespace(run=lambda c: c)
    found = calibrate._fit_prefill_frontend(replay, Calibration(prefill_scale=current, frontend_ms=3.0), width)
    return found, trials


@pytest.mark.parametrize("best", [0.7, 1.0, 1.3, 1.55])
def test_the_golden_section_search_finds_the_least_misfit(monkeypatch, best):
    found, trials = _golden(monkeypatch, best)
    assert found.prefill_scale == pytest.approx(best, rel=0.03)
    assert found.frontend_ms == pytest.approx(10.0 * found.prefill_scale), "the best trial's front-end latency"
    assert len(trials) == 9, "two first points, then one new point per step (misfits are cached)"


def test_the_golden_section_search_stays_within_its_window(monkeypatch):
    found, trials = _golden(monkeypatch, best_scale=3.0, current=1.0, width=0.5)
    assert max(trials) <= math.exp(0.5) + 1e-12 and found.prefill_scale > math.exp(0.5) * 0.97
    found, trials = _golden(monkeypatch, best_scale=0.1, current=0.25, width=0.5)
    assert min(trials) >= 0.2 - 1e-12, "and within the scale bounds"
    assert found.prefill_scale == pytest.approx(0.2, rel=0.03)
    found, trials = _golden(monkeypatch, best_scale=9.0, current=4.5, width=0.5)
    assert max(trials) <= 5.0 + 1e-12 and found.prefill_scale == pytest.approx(5.0, rel=0.03)


def _bisection(target: float, current: float, width: float) -> Calibration:
    replay = SimpleNamespace(real={"ttft": np.array([target])}, run=lambda c: c,
                             mean=lambda sim, metric: 100.0 * sim.prefill_scale)
    return calibrate._fit_prefill(replay, Calibration(prefill_scale=current), width=width)


def test_the_bisection_moves_towards_a_lower_mean_when_the_simulation_is_slow():
    assert _bisection(80.0, 1.0, math.log(4.0)).prefill_scale == pytest.approx(0.8, rel=0.05)


def test_the_bisection_stays_within_its_window_and_the_bounds():
    assert _bisection(400.0, 1.0, 0.5).prefill_scale <= math.exp(0.5)
    assert _bisection(400.0, 1.0, 0.5).prefill_scale > math.exp(0.5) * 0.97
    assert _bisection(10.0, 0.25, 0.5).prefill_scale >= 0.2
    assert _bisection(10.0, 0.25, 0.5).prefill_scale == pytest.approx(0.2, rel=0.03)
    assert _bisection(900.0, 4.5, 0.5).prefill_scale <= 5.0


def test_a_queue_with_nothing_running_is_busy_time():
    """Grid 0..20 s (21 points), two slots. At 0 both requests wait and none runs; 1-9 one runs
    (1,000 tokens) while the other waits; 10-20 both run, no queue. The pool bound 10 of 21 busy
    instants: less than half, so no capacity shows (counting only instants with a running
    request as busy, 10 of 20 would pass)."""
    rows = [(0.0, 1.0, 100.0, 1000, 0), (0.0, 10.0, 100.0, 1000, 0)]
    send, first, end, isl, osl = (np.array(col) for col in zip(*rows, strict=True))
    measured = Measured("m", "test", send, first, end, isl, osl)
    assert calibrate.measured_kv_tokens(measured, max_sequences=2, ranks=1, window=(0.0, 20.0), points=21) is None
    # One more instant of queue while one runs (B waits until 11): 11 of 21 bound, a capacity shows.
    measured = Measured("m", "test", send, first + np.array([0.0, 1.0]), end, isl, osl)
    assert calibrate.measured_kv_tokens(measured, max_sequences=2, ranks=1, window=(0.0, 20.0),
                                        points=21) == 1000


def test_the_sync_comes_off_only_above_twice_it():
    """Both TPOTs must be *above* twice the sync: exactly twice keeps the plain ratio."""
    replay = SimpleNamespace(run=lambda c: None, mean=lambda sim, metric: 4.0,
                             real={"tpot": np.array([12.0])}, sync_ms=2.0)
    assert calibrate._fit_decode(replay, Calibration(decode_scale=1.0)).decode_scale == pytest.approx(3.0)
    replay.mean = lambda sim, metric: 4.5
    assert calibrate._fit_decode(replay, Calibration(decode_scale=1.0)).decode_scale == pytest.approx(10.0 / 2.5)


def test_the_bisection_spends_six_simulations():
    runs: list[float] = []
    replay = SimpleNamespace(real={"ttft": np.array([150.0])}, run=lambda c: runs.append(c.prefill_scale) or c,
                             mean=lambda sim, metric: 100.0 * sim.prefill_scale)
    calibrate._fit_prefill(replay, Calibration(prefill_scale=1.0), width=1.0)
    assert len(runs) == 6
    assert max(runs) < math.exp(1.0) and min(runs) > math.exp(-1.0)


def _kv(rows, **kwargs):
    send, first, end, isl, osl = (np.array(col) for col in zip(*rows, strict=True))
    return calibrate.measured_kv_tokens(Measured("m", "test", send, first, end, isl, osl), **kwargs)


def test_one_waiting_or_one_running_request_is_busy_time():
    """Grid 0..40 s, two slots. At 0 one request waits alone; 1-19 one runs while the other
    waits (bound); 20-40 both run. Bound 20 of 41 busy instants: not half."""
    rows = [(0.0, 1.0, 1000.0, 1000, 0), (0.5, 20.0, 1000.0, 1000, 0)]
    assert _kv(rows, max_sequences=2, ranks=1, window=(0.0, 40.0), points=41) is None
    # One running request with no queue (12-20) is busy too: bound 10 (0-9) of 21.
    rows = [(0.0, 0.0, 1000.0, 1000, 0), (0.0, 10.0, 12.0, 1000, 0)]
    assert _kv(rows, max_sequences=2, ranks=1, window=(0.0, 20.0), points=21) is None


def test_the_default_window_spans_the_first_send_to_the_last_end():
    rows = [(0.0, 0.0, 20.0, 1000, 0), (0.0, 10.0, 20.0, 1000, 0), (9.0, 9.5, 10.0, 10, 0)]
    assert _kv(rows, max_sequences=2, ranks=1, points=21) == \
        _kv(rows, max_sequences=2, ranks=1, window=(0.0, 20.0), points=21) == 1000


def test_a_fit_mask_sets_the_window(monkeypatch):
    seen = []
    monkeypatch.setattr(calibrate, "measured_kv_tokens", lambda m, s, r, window: seen.append(window) or 5)
    measured = Measured("m", "test", np.array([0.0, 2.0, 4.0]), np.array([1.0, 3.0, 5.0]),
                        np.array([9.0, 3.5, 6.0]), np.array([10, 10, 10]), np.array([1, 1, 1]))
    replay = SimpleNamespace(runs=[measured], fits=[np.array([False, True, True])], max_sequences=8, ranks=1)
    assert calibrate._kv_tokens(replay) == 5 and seen == [(2.0, 6.0)]


def test_no_measured_run_is_an_error():
    with pytest.raises(calibrate.ConfigError, match="at least one measured run"):
        calibrate._as_runs([], None)


def _run(n: int = 3) -> Measured:
    return Measured("m", "test", np.zeros(n), np.ones(n), np.full(n, 2.0), np.full(n, 10), np.ones(n, dtype=int))


def test_fit_masks_pair_with_the_runs():
    a, b = _run(), _run()
    mask = np.array([True, False, True])
    assert calibrate._as_runs(a, mask)[1][0] is mask
    assert calibrate._as_runs(a, None)[1] == [None]
    assert calibrate._as_runs([a, b], None)[1] == [None, None], "no mask: every request of every run"
    assert calibrate._as_runs([a, b], [None])[1] == [None, None]
    runs, fits = calibrate._as_runs([a, b], [mask, None])
    assert runs == [a, b] and fits[0] is mask and fits[1] is None
    assert calibrate._as_runs([a], [mask])[1][0] is mask


@pytest.mark.parametrize("fit", [np.array([True, False, True]), [np.array([True, False, True])],
                                 [None, None, None]])
def test_a_mask_count_that_does_not_match_the_runs_is_an_error(fit):
    with pytest.raises(calibrate.ConfigError, match="fit masks for 2 measured runs"):
        calibrate._as_runs([_run(), _run()], fit)


def test_terciles_cut_at_a_third_and_two_thirds():
    labels = separate.group_labels([np.arange(1, 13)], [None])  # cuts at 4.67 and 8.33
    assert labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    # A length equal to a cut goes above it: 1,1,1,2,2,2 has cuts 1 and 2.
    assert separate.group_labels([np.array([1, 1, 1, 2, 2, 2])], [None]).tolist() == [1, 1, 1, 2, 2, 2]


def test_the_separability_summary_and_notes():
    found = separate.Separability(True, 0.123456, 4)
    assert found.summary() == {"prefill_scale/frontend_ms": "separated", "cosine": 0.1235, "groups": 4}
    assert found.notes() == ["the data separates prefill scale from front-end latency (cosine 0.123 over 4 groups): "
                             "both fitted"]
    why = separate.Separability(False, None, 1, "one group of requests")
    assert "(one group of requests)" in why.notes()[0] and why.summary()["cosine"] is None
    collinear = separate.Separability(False, 0.99, 3)
    assert "(cosine 0.990 over 3 groups)" in collinear.notes()[0]
    assert collinear.summary()["prefill_scale/frontend_ms"] == "not separable"
