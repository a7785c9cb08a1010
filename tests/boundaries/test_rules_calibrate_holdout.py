"""Rules of calibrate's hold-out (studies/holdout.py): one run is fitted on its first third of
requests (at least one) and predicted on the rest; several runs are each predicted by a fit to
all the others; errors are signed mean errors over the kept requests; the mean absolute error
averages the three metrics; the warning counts hold-outs the calibration predicts worse, not
equally well."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from servesim.studies import holdout


def _stub(monkeypatch) -> list:
    calls: list = []

    def fit(config, measured, keep_traffic=False, fit=None):
        calls.append(("fit", measured, None if fit is None else fit.tolist()))
        return SimpleNamespace(calibration="fitted")

    def predict(config, runs, calibrations, keep_traffic=False, fit=None):
        calls.append(("predict", list(runs), None if fit is None else [f.tolist() for f in fit]))
        return {"ttft": 1.0, "tpot": 2.0, "e2e": 3.0}, {"ttft": 0.5, "tpot": 0.5, "e2e": 0.5}

    monkeypatch.setattr(holdout, "calibrate", fit)
    monkeypatch.setattr(holdout, "predict_errors", predict)
    return calls


class _Run:
    def __init__(self, n: int, path: str = "m.csv") -> None:
        self.n, self.path = n, path

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize(("n", "fitted"), [(7, 2), (6, 2), (9, 3), (2, 1), (1, 1)])
def test_one_run_fits_its_first_third(monkeypatch, n, fitted):
    calls = _stub(monkeypatch)
    run = _Run(n)
    (row,) = holdout.check(None, [run])
    (_, _, mask), (_, _, predicted) = calls
    assert mask == [True] * fitted + [False] * (n - fitted)
    assert predicted == [[not m for m in mask]]
    assert (row.calibrated_on, row.predicted) == ("first third of the requests", "the other two thirds")


def test_several_runs_are_each_predicted_by_the_others(monkeypatch):
    calls = _stub(monkeypatch)
    runs = [_Run(3, "a"), _Run(3, "b"), _Run(3, "c")]
    rows = holdout.check(None, runs)
    fits = [c[1] for c in calls if c[0] == "fit"]
    assert fits == [[runs[1], runs[2]], [runs[0], runs[2]], [runs[0], runs[1]]]
    assert [r.predicted for r in rows] == ["run 1 (a)", "run 2 (b)", "run 3 (c)"]


def _row(plain: float, tuned: float) -> holdout.HoldoutRow:
    return holdout.HoldoutRow("t", "a", "b", dict.fromkeys(("ttft", "tpot", "e2e"), plain),
                              {"ttft": tuned, "tpot": -tuned, "e2e": tuned})


def test_the_mean_absolute_error_of_a_row():
    row = holdout.HoldoutRow("t", "a", "b", {"ttft": 3.0, "tpot": -6.0, "e2e": 0.0}, {})
    assert row.mean_abs(row.uncalibrated) == 3.0


def test_the_warning_counts_hold_outs_predicted_worse():
    assert "warning" not in holdout.render_check([_row(5.0, 5.0), _row(5.0, 1.0)]), "equal is not worse"
    text = holdout.render_check([_row(5.0, 5.5), _row(5.0, 1.0), _row(2.0, -3.0)])
    assert "warning: on 2 of 3 hold-outs" in text


def test_errors_over_the_kept_requests(monkeypatch):
    sim = {"ttft": np.array([10.0, 20.0, 30.0]), "tpot": np.array([1.0, 2.0, 3.0]), "e2e": np.array([5.0, 5.0, 5.0])}
    monkeypatch.setattr(holdout, "simulated_latencies", lambda config: sim)
    real = {"ttft": np.array([10.0, 10.0, 10.0]), "tpot": np.array([1.0, 1.0, 1.0]), "e2e": np.array([5.0, 5.0, 5.0])}
    keep = np.array([False, True, True])
    got = holdout._errors({}, real, keep)
    assert got == {"ttft": pytest.approx(150.0), "tpot": pytest.approx(150.0), "e2e": 0.0}
    assert holdout._errors({}, real)["ttft"] == pytest.approx(100.0)


def test_the_hold_out_table():
    text = holdout.render([_row(5.0, 1.0)], "Load")
    assert "| t | a | b | +5.0 → +1.0 % | +5.0 → -1.0 % | +5.0 → +1.0 % | 5.0 → 1.0 % |" in text
