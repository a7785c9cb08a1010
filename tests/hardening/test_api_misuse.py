"""The Python API given the wrong things: a `ServesimError` (ConfigError for bad arguments,
RunError for a scaling policy that breaks its contract), never a stray TypeError or
AttributeError from inside servesim (issue 19)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import servesim
from servesim import ConfigError, RunError, ServesimError
from servesim.scaling.contract import Decision

from hostile import config_with

CONFIG = config_with({"traffic.load": {"type": "poisson", "requests_per_second": 50},
                      "traffic.stop": {"requests": 40}})


@pytest.mark.parametrize("bad", [None, [1, 2], 5, 2.5, b"engine: {}", object(), {"engine": None}, {}])
def test_simulate_with_a_bad_config_argument(bad):
    with pytest.raises(ConfigError):
        servesim.simulate(bad)


@pytest.mark.parametrize("bad", [None, 5, ["a.yaml"]])
def test_load_config_with_a_bad_path(bad):
    with pytest.raises(ConfigError):
        servesim.load_config(bad)


def test_load_config_with_a_directory(tmp_path):
    with pytest.raises(ConfigError, match=str(tmp_path)):
        servesim.load_config(tmp_path)


def test_bad_overrides_argument(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("engine: {model: m}\n")
    with pytest.raises(ConfigError):
        servesim.load_config(path, overrides=[None])


@pytest.mark.parametrize("keyword, value", [("unservable", "bogus"), ("scaling", object()),
                                            ("scaling", "planner")])
def test_bad_keyword_arguments(keyword, value):
    with pytest.raises(ConfigError, match=keyword):
        servesim.simulate(CONFIG, **{keyword: value})


class _Policy:
    """A scaling policy answering with fixed values."""

    def __init__(self, first=100.0, answer=None):
        self.first = first
        self.answer = answer

    def initial_tick_ms(self):
        return self.first

    def on_tick(self, snapshot):
        return self.answer(snapshot) if callable(self.answer) else self.answer


@pytest.mark.parametrize("policy", [
    _Policy(answer=None),
    _Policy(answer="2"),
    _Policy(answer={"target_decode": 2}),
    _Policy(answer=Decision(target_decode=-1, next_tick_ms=200.0)),
    _Policy(answer=Decision(target_decode="2", next_tick_ms=200.0)),
    _Policy(answer=Decision(target_decode=2.5, next_tick_ms=200.0)),
    _Policy(answer=Decision(target_decode=2, next_tick_ms=math.nan)),
    _Policy(answer=Decision(target_decode=2, next_tick_ms="soon")),
    _Policy(first=None, answer=Decision()),
    _Policy(first="now", answer=Decision()),
    _Policy(first=math.nan, answer=Decision()),
], ids=lambda p: f"first={p.first!r},answer={p.answer!r}"[:60])
def test_a_policy_breaking_the_contract_is_a_run_error(policy):
    with pytest.raises(RunError, match="scaling policy"):
        servesim.simulate(CONFIG, scaling=policy)


def test_a_policy_that_scales_to_zero_workers(tmp_path):
    """No worker left: later arrivals cannot be served; the run still ends and accounts for them."""
    policy = _Policy(answer=lambda snap: Decision(target_decode=0, next_tick_ms=snap.now_ms + 100))
    try:
        report = servesim.simulate(CONFIG, scaling=policy, capture_per_request=True)
    except ServesimError:
        return
    summary = report.summary
    assert summary["completed_requests"] + summary["rejected_requests"] + summary["incomplete_requests"] == 40


def test_a_path_that_is_not_a_config(tmp_path):
    path = Path(tmp_path / "x.yaml")
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigError, match="x.yaml"):
        servesim.simulate(path)
