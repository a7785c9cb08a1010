"""`servesim.perf.aicdecode`: batched decode latencies equal the engine's per-call answers bit for bit.

Over the generation-attention table's whole grid for the engines the benchmark cases time
(Llama-3.1-8B and Qwen3-32B-FP8 on H200, vLLM 0.19.0): every batch of the table's batch axis,
its neighbours and the midpoints between them, at every context of the table's sequence axis
and its neighbours, densely through the range's end (where lookups start to be held), and at
random contexts far past it.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from servesim.perf import aic, aicdata
from servesim.perf.timing import quantize_ms

CASES = [("meta-llama/Meta-Llama-3.1-8B", 16), ("Qwen/Qwen3-32B-FP8", 64)]


@pytest.fixture(autouse=True)
def _database(reference_systems: Path) -> None:
    """Every test here uses servesim's default database (fetched once)."""


def key(model: str, block: int) -> aic.AicKey:
    return aic.AicKey(model=model, system="h200_sxm", backend="vllm", version="0.19.0", tp=1, pp=1,
                      attention_dp=1, moe_tp=None, moe_ep=None, block_size=block,
                      systems_path=str(aicdata.systems_root()))


def lookup_of(k: aic.AicKey):
    engine = aic.aic_engine(k)
    found = aic.decode_lookup(k)
    assert found is not None, "the batched lookup applies to this engine"
    return engine, found


def grid_points(found) -> tuple[list[int], list[int]]:
    """The batches and sequence lengths of the table slice's grid (at the engine's head count)."""
    by_b = found._table.root[int(found._n)]
    batches = sorted(by_b)
    seqs = sorted({int(s) for keys, _ in by_b.values() for s in keys})
    return batches, seqs


def assert_equal(engine, found, batch: int, contexts: list[int]) -> None:
    values, _ = found.compute(batch, np.array(contexts, dtype=np.int64))
    assert values is not None
    expected = [engine.predict_decode_latency(batch, c, 2) for c in contexts]
    wrong = [(c, v, e) for c, v, e in zip(contexts, values.tolist(), expected, strict=True) if v != e]
    assert not wrong, f"batch {batch}: {len(wrong)} of {len(contexts)} differ, first {wrong[0]}"


@pytest.mark.parametrize(("model", "block"), CASES)
def test_every_grid_batch_at_every_grid_context(model: str, block: int) -> None:
    engine, found = lookup_of(key(model, block))
    batches, seqs = grid_points(found)
    between = {(a + b) // 2 for a, b in zip(batches, batches[1:], strict=False)}
    near = {b + d for b in batches for d in (-1, 1)} | between
    all_batches = sorted(b for b in set(batches) | near if b >= 1)
    contexts = sorted({max(0, s - 1 + d) for s in seqs for d in (-2, -1, 0, 1, 2)}
                      | {int(s / 0.9) + d for s in seqs for d in (-1, 0, 1)})
    for batch in all_batches:
        assert_equal(engine, found, batch, contexts)


@pytest.mark.parametrize(("model", "block"), CASES)
def test_densely_through_the_end_of_the_range(model: str, block: int) -> None:
    """Where the five lookups of a call go from all inside the table to all held."""
    engine, found = lookup_of(key(model, block))
    batches, _ = grid_points(found)
    rng = random.Random(7)
    by_b = found._table.root[int(found._n)]
    for batch in sorted(set(batches) | {3, 5, 6, 12, 100, 183}):
        top = int(max(by_b[b][0][-1] for b in batches if b <= max(batch, batches[0])) if batch >= batches[0]
                  else by_b[batches[0]][0][-1])
        lo, hi = int(top * 0.85), int(top * 1.25)
        step = max(1, (hi - lo) // 600)
        contexts = list(range(lo, hi, step)) + [rng.randrange(top, 4 * top) for _ in range(60)]
        assert_equal(engine, found, batch, sorted(set(contexts)))


def test_small_contexts_and_batches() -> None:
    engine, found = lookup_of(key(*CASES[0]))
    for batch in (1, 2, 3, 7):
        assert_equal(engine, found, batch, list(range(0, 300)))


def test_a_run_switches_to_the_lookup_and_its_values_stay_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the switch, `AicTiming.decode_series` answers from the lookup: the same quantised values."""
    k = key(*CASES[0])
    engine = aic.aic_engine(k)
    timing = aic.AicTiming(engine, key=k)
    monkeypatch.setattr(aic, "BATCHED_AFTER_S", 0.0)
    for batch, start in ((1, 30000), (4, 36000), (6, 90000)):
        series = timing.decode_series(batch, range(start * batch, (start + 200) * batch, batch), 0)
        expected = [quantize_ms(engine.predict_decode_latency(batch, c, 2)) for c in range(start, start + 200)]
        assert series == expected
    lookup = aic.decode_lookup(k)
    assert lookup is not None and lookup.enabled
    assert timing.calls == 600


def test_a_difference_turns_the_lookup_off() -> None:
    """The guard: a block whose checked value differs from the engine's is not used, nor any after."""
    k = key(*CASES[0])
    engine, found = lookup_of(k)

    class Wrong:
        def __getattr__(self, name: str):
            return getattr(engine, name)

        def predict_decode_latency(self, batch: int, ctx: int, osl: int) -> float:
            return engine.predict_decode_latency(batch, ctx, osl) + 1.0

    from servesim.perf import aicdecode

    spec = __import__("json").loads(aic._SPECS[k])
    systems = Path(k.systems_path or "")
    fresh = aicdecode.build(Wrong(), spec, systems, aic._data_dir(systems, k.system))
    assert fresh is not None
    values = fresh.decode(2, [50000, 50001])
    assert not fresh.enabled
    assert values == [engine.predict_decode_latency(2, c, 2) + 1.0 for c in (50000, 50001)]
