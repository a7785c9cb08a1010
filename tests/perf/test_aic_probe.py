"""`servesim.perf.aic._probe`: an engine's two probe passes asked at once, errors as asked in turn."""

from __future__ import annotations

import threading

import pytest

from servesim.perf import aic


class FakeEngine:
    """Answers like an engine; `prefill_error`/`decode_error` make that probe raise."""

    def __init__(self, prefill_error: Exception | None = None, decode_error: Exception | None = None) -> None:
        self.prefill_error = prefill_error
        self.decode_error = decode_error
        self.decode_asked = threading.Event()
        self.threads: dict[str, int] = {}

    def predict_prefill_latency(self, bs: int, isl: int, prefix: int) -> float:
        self.threads["prefill"] = threading.get_ident()
        overlapped = self.decode_asked.wait(10)  # the decode probe is asked while this one runs
        if self.prefill_error is not None:
            raise self.prefill_error
        assert (bs, isl, prefix) == (1, 128, 0)
        return 30.0 if overlapped else -1.0

    def predict_decode_latency(self, bs: int, isl: int, osl: int) -> float:
        self.threads["decode"] = threading.get_ident()
        self.decode_asked.set()
        if self.decode_error is not None:
            raise self.decode_error
        assert (bs, isl, osl) == (1, 128, 2)
        return 20.0


def test_both_probes_are_asked_at_once_and_answered_in_order() -> None:
    engine = FakeEngine()
    assert aic._probe(engine) == (30.0, 20.0)  # 30.0: the prefill probe saw the decode probe asked
    assert engine.threads["decode"] == threading.get_ident()
    assert engine.threads["prefill"] != threading.get_ident()
    assert not [t for t in threading.enumerate() if t.name == "servesim-aic-probe"]  # joined


def test_a_failed_prefill_probe_is_raised_even_when_decode_fails_too() -> None:
    with pytest.raises(ValueError, match="prefill table"):
        aic._probe(FakeEngine(prefill_error=ValueError("prefill table")))
    with pytest.raises(ValueError, match="prefill table"):
        aic._probe(FakeEngine(prefill_error=ValueError("prefill table"), decode_error=KeyError("decode")))


def test_a_failed_decode_probe_is_raised() -> None:
    with pytest.raises(KeyError, match="decode table"):
        aic._probe(FakeEngine(decode_error=KeyError("decode table")))
