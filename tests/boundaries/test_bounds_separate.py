"""Calibration rules around the KV capacity and the TTFT split (studies/calibrate.py and
studies/separate.py): the KV pool counts as the limit only when it bound admission for at least
half the busy time; a running request's KV grows linearly from its prompt to prompt + output
between its first and last token; the plateau test keeps p10 exactly at 0.75 × p90; the
front-end latency is the request-weighted relative gap, never negative; prompt-length terciles
group the requests per run; the two effects are separable only below the collinearity cosine."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from servesim.measured.run import Measured
from servesim.perf.calibration import Calibration
from servesim.studies import separate
from servesim.studies.calibrate import measured_kv_tokens


def _measured(rows: list[tuple[float, float, float, int, int]]) -> Measured:
    """Rows of (send, first, end, input, output) seconds and tokens."""
    send, first, end, isl, osl = (np.array(col) for col in zip(*rows, strict=True))
    return Measured("m", "test", send.astype(float), first.astype(float), end.astype(float), isl, osl)


# A grid of whole seconds 0..9 (window (0, 9), 10 points): each point is one tenth of the busy time.
GRID = {"window": (0.0, 9.0), "points": 10}


@pytest.mark.parametrize(("queue_until", "found"), [(5.0, 1000), (4.0, None), (6.0, 1000)])
def test_the_pool_must_bind_at_least_half_the_busy_time(queue_until, found):
    # One prompt of 1,000 tokens runs all the time; a second request waits until `queue_until`.
    rows = [(0.0, 0.0, 20.0, 1000, 0), (0.0, queue_until, 30.0, 1000, 0)]
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=1, **GRID) == found


def test_a_running_request_grows_from_its_prompt_to_prompt_plus_output():
    # Usage at t = 10,000 + t/20 × 2,000 = 10,000 + 100 t over t = 0..10 (a queue all along):
    # p10 10,100 ≥ 0.75 × p90 10,900, median 10,500.
    rows = [(0.0, 0.0, 20.0, 10_000, 2_000), (0.0, 50.0, 60.0, 1, 0)]
    grid = {"window": (0.0, 10.0), "points": 11}
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=1, **grid) == 10_500
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=2, **grid) == 5_250
    # Sent at 0 but first token at 10: the prompt alone until then (its queue time is no growth).
    late = [(0.0, 0.0, 20.0, 10_000, 0), (0.0, 50.0, 60.0, 1, 0)]
    assert measured_kv_tokens(_measured(late), max_sequences=8, ranks=1, **grid) == 10_000


@pytest.mark.parametrize(("low", "found"), [(7_500, 10_000), (7_499, None)])
def test_p10_exactly_at_the_plateau_share_counts(low, found):
    # 11 points: 2 at `low`, 9 at 10,000; p10 is the second-smallest, p90 the tenth.
    rows = [(0.0, 0.0, 2.0, low, 0), (2.0, 2.0, 11.0, 10_000, 0), (0.0, 50.0, 60.0, 1, 0)]
    grid = {"window": (0.0, 10.0), "points": 11}
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=1, **grid) == found


def test_growth_runs_over_the_decode_span_not_from_time_zero():
    # First token at 10, last at 30: usage 10,000 + (t − 10)/20 × 2,000 over t = 10..20 → median 10,500
    # (against the end time alone it would be (t − 10)/30 × 2,000: 10,333).
    rows = [(0.0, 10.0, 30.0, 10_000, 2_000), (0.0, 50.0, 60.0, 1, 0)]
    grid = {"window": (10.0, 20.0), "points": 11}
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=1, **grid) == 10_500


@pytest.mark.parametrize(("queue_until", "found"), [(3.0, 1000), (2.0, None)])
def test_idle_time_does_not_count_against_the_bound_share(queue_until, found):
    # Grid 0..9; nothing runs or waits from 6 on (idle), so the busy time is 0..5 (6 points):
    # a queue over 0..2 (3 points) is half of it, though under a third of the window.
    rows = [(0.0, 0.0, 6.0, 1000, 0), (0.0, queue_until, 6.0, 1000, 0)]
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=1, **GRID) == found


def test_without_a_queue_the_pool_did_not_bind():
    rows = [(0.0, 0.0, 20.0, 10_000, 0), (0.0, 0.0, 20.0, 10_000, 0)]
    assert measured_kv_tokens(_measured(rows), max_sequences=8, ranks=1, **GRID) is None


def _replay(groups, real, complete=True):
    return SimpleNamespace(groups=np.array(groups), real={"ttft": np.array(real, dtype=float)},
                           complete=lambda sim: complete)


def test_the_frontend_is_the_weighted_relative_gap():
    replay = _replay([0, 0, 1, 1], [100, 100, 200, 200])
    frontend, misfit = separate.frontend_and_misfit(replay, {"ttft": np.array([80.0, 80.0, 150.0, 150.0])})
    # weights 2/100² and 2/200²: (2e-4 × 20 + 5e-5 × 50) / 2.5e-4 = 26
    assert frontend == pytest.approx(26.0)
    assert misfit == pytest.approx(2e-4 * 6**2 + 5e-5 * 24**2)


def test_a_simulation_slower_than_measured_gets_no_negative_frontend():
    replay = _replay([0, 1], [100, 200])
    frontend, misfit = separate.frontend_and_misfit(replay, {"ttft": np.array([110.0, 220.0])})
    assert frontend == 0.0
    assert misfit == pytest.approx(1e-4 * 10**2 + 2.5e-5 * 20**2)


def test_a_simulation_that_lost_requests_pools_one_group():
    replay = _replay([0, 1], [100, 300], complete=False)
    frontend, _ = separate.frontend_and_misfit(replay, {"ttft": np.array([150.0])})
    assert frontend == pytest.approx(50.0), "one group: measured mean 200 − simulated 150"


def test_terciles_per_run():
    labels = separate.group_labels([np.array([10, 20, 30, 40, 50, 60]), np.array([5, 5, 5])], [None, None])
    assert labels.tolist() == [0, 0, 1, 1, 2, 2, 5, 5, 5], "a run's index × 3 + its tercile"
    fit = np.array([True, False, True])
    assert separate.group_labels([np.array([1, 2, 3])], [fit]).tolist() == [0, 2]
    assert separate.group_labels([np.zeros(0, dtype=int)], [None]).tolist() == []


class _Scaled:
    """A replay whose simulated TTFT is prefill_scale × the measured one (per group)."""

    def __init__(self, real, groups, complete=True):
        self.real = {"ttft": np.array(real, dtype=float)}
        self.groups = np.array(groups)
        self._complete = complete

    def run(self, calibration: Calibration):
        return {"ttft": self.real["ttft"] * calibration.prefill_scale}

    def complete(self, sim):
        return self._complete


def test_effects_pointing_different_ways_are_separable():
    # Prefill effect per group: constant (0.2 / ln 1.2); front-end effect: 1/100, 1/200.
    # cosine = 0.03 / sqrt(4 × 2.5e-4) = 0.9487 < 0.98.
    found = separate.separability(_Scaled([100, 100, 200, 200], [0, 0, 1, 1]), Calibration())
    assert found.prefill_frontend and found.cosine == pytest.approx(0.03 / (4 * 2.5e-4) ** 0.5)
    assert found.groups == 2


def test_a_cosine_exactly_at_the_collinear_bound_is_not_separable(monkeypatch):
    cosine = separate.separability(_Scaled([100, 100, 200, 200], [0, 0, 1, 1]), Calibration()).cosine
    assert cosine == pytest.approx(0.03 / (4 * 2.5e-4) ** 0.5)
    monkeypatch.setattr(separate, "COLLINEAR", cosine)
    found = separate.separability(_Scaled([100, 100, 200, 200], [0, 0, 1, 1]), Calibration())
    assert not found.prefill_frontend, "the bound itself is collinear"
    monkeypatch.setattr(separate, "COLLINEAR", cosine + 1e-9)
    assert separate.separability(_Scaled([100, 100, 200, 200], [0, 0, 1, 1]), Calibration()).prefill_frontend


def test_equal_groups_or_one_group_are_not_separable():
    same = separate.separability(_Scaled([100, 100, 100, 100], [0, 0, 1, 1]), Calibration())
    assert not same.prefill_frontend and same.cosine == pytest.approx(1.0)
    one = separate.separability(_Scaled([100, 200], [0, 0]), Calibration())
    assert not one.prefill_frontend and one.cosine is None and one.reason == "one group of requests"
    lost = separate.separability(_Scaled([100, 200], [0, 1], complete=False), Calibration())
    assert not lost.prefill_frontend and lost.cosine is None and "lost" in lost.reason
