"""Chained block keys: equal token prefixes give equal keys, however the runs are split."""

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.cache.blocks import ROOT_KEY, KeyMemo, chain_keys
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids


def _tokens(runs):
    out = []
    for value, count in runs:
        if count > 0:
            out.extend([value] * count)
        else:
            out.extend(range(value, value - count))
    return out


def _as_singletons(tokens):
    return [(t, 1) for t in tokens]


def test_trace_blocks_expand_to_engine_blocks():
    runs = expand_hash_ids([7, 8], 512, 1000)
    keys = chain_keys(runs, 64, 1000 // 64)
    assert len(keys) == 15
    assert len(set(keys)) == 15, "a repeated value still gives distinct chained keys"
    other = chain_keys(expand_hash_ids([7, 9], 512, 1024), 64, 16)
    assert keys[:8] == other[:8] and keys[8] != other[8]


def test_same_tokens_split_differently_share_keys():
    a = [(5, 30), (5, 34), (GENERATED_BASE, -64)]
    b = [(5, 64), (GENERATED_BASE, -10), (GENERATED_BASE + 10, -54)]
    assert chain_keys(a, 64, 2) == chain_keys(b, 64, 2)


def test_first_block_offset_continues_the_chain():
    runs = expand_hash_ids([1, 2, 3, 4], 16, 64)
    whole = chain_keys(runs, 16, 4)
    assert chain_keys(runs, 16, 2, first_block=2, parent=whole[1]) == whole[2:]


run_strategy = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 3), st.integers(1, 40)),
        st.tuples(st.integers(0, 3).map(lambda v: GENERATED_BASE + 100 * v), st.integers(1, 40).map(lambda c: -c)),
    ),
    min_size=1, max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(run_strategy, st.sampled_from([1, 2, 16, 64]))
def test_keys_depend_only_on_token_content(runs, block_size):
    tokens = _tokens(runs)
    n = len(tokens) // block_size
    assert chain_keys(runs, block_size, n) == chain_keys(_as_singletons(tokens), block_size, n)


@settings(max_examples=200, deadline=None)
@given(run_strategy, run_strategy, st.sampled_from([2, 16]))
def test_keys_match_exactly_on_common_prefix(runs_a, runs_b, block_size):
    ta, tb = _tokens(runs_a), _tokens(runs_b)
    na, nb = len(ta) // block_size, len(tb) // block_size
    ka, kb = chain_keys(runs_a, block_size, na), chain_keys(runs_b, block_size, nb)
    for i in range(min(na, nb)):
        same = ta[: (i + 1) * block_size] == tb[: (i + 1) * block_size]
        assert (ka[i] == kb[i]) == same


@settings(max_examples=200, deadline=None)
@given(run_strategy, st.sampled_from([1, 2, 16]), st.data())
def test_keys_from_any_block_continue_the_chain(runs, block_size, data):
    """Computing the keys in pieces (as requests do, a chunk at a time) gives the same keys."""
    n = len(_tokens(runs)) // block_size
    whole = chain_keys(runs, block_size, n)
    first = data.draw(st.integers(0, n))
    parent = whole[first - 1] if first else ROOT_KEY
    assert chain_keys(runs, block_size, n - first, first, parent) == whole[first:]


@settings(max_examples=200, deadline=None)
@given(run_strategy, run_strategy, st.sampled_from([1, 2, 16]))
def test_keys_at_different_positions_never_match(runs_a, runs_b, block_size):
    """Repeated blocks take consecutive keys: they must not collide with another position's."""
    ta, tb = _tokens(runs_a), _tokens(runs_b)
    ka = chain_keys(runs_a, block_size, len(ta) // block_size)
    kb = chain_keys(runs_b, block_size, len(tb) // block_size)
    where = {key: i for i, key in enumerate(ka)}
    assert len(where) == len(ka)
    for j, key in enumerate(kb):
        i = where.get(key)
        assert i is None or (i == j and ta[: (i + 1) * block_size] == tb[: (j + 1) * block_size])


def test_a_long_repeated_value_takes_one_hash():
    runs = expand_hash_ids([3, 3, 4], 512, 1536)
    keys = chain_keys(runs, 64, 24)
    assert keys[1:16] == list(range(keys[0] + 1, keys[0] + 16)), "one value's blocks: consecutive keys"
    assert keys[16] != keys[15] + 1


whole_run = st.tuples(st.integers(0, 3), st.sampled_from([16, 32, 48]))  # whole blocks of one value
other_run = st.one_of(
    st.tuples(st.integers(0, 3), st.integers(1, 40)),  # a partial block
    st.tuples(st.integers(0, 3).map(lambda v: GENERATED_BASE + 100 * v), st.integers(1, 40).map(lambda c: -c)),
)
piece = st.tuples(st.lists(whole_run, max_size=4), st.lists(other_run, max_size=1)).map(lambda p: p[0] + p[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(piece, min_size=1, max_size=4), st.sampled_from([8, 16]), st.integers(0, 60), st.data())
def test_memo_gives_the_keys_of_a_fresh_chain(pieces, block_size, limit, data):
    """Prompts made of shared pieces (repeated values, partial and generated runs, asking for
    fewer blocks than a run has), keyed in turn through one small memo (its edges split where
    prompts part; starting afresh when full), get exactly the keys computed without it."""
    memo = KeyMemo(limit)
    for _ in range(8):
        runs = [run for part in data.draw(st.lists(st.sampled_from(pieces), max_size=4)) for run in part]
        n = data.draw(st.integers(0, len(_tokens(runs)) // block_size))
        assert chain_keys(runs, block_size, n, memo=memo) == chain_keys(runs, block_size, n, memo=None)
    chain_keys([(0, block_size)], block_size, 1, memo=memo)
    assert memo.size <= limit + 1, "full: it starts afresh"


def test_memo_shares_a_prefix_between_prompts():
    memo = KeyMemo(1000)
    a = chain_keys(expand_hash_ids([1, 2, 3], 64, 192), 16, 12, memo=memo)
    b = chain_keys(expand_hash_ids([1, 2, 4], 64, 192), 16, 12, memo=memo)
    assert a[:8] == b[:8] and all(x is y for x, y in zip(a[:8], b[:8], strict=True)), "the same int objects"
    assert a[8:] != b[8:] and memo.size == 16
    assert chain_keys(expand_hash_ids([1, 2, 3, 5], 64, 256), 16, 16, memo=memo)[:12] == a, "after the split"
