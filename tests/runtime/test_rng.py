"""Tests for servesim.runtime.rng (bit-exact Rust rand 0.9 StdRng model).

Expected literals were derived once, while developing, from the reference pack's oracle scripts
(cases/tools/rustrand.py and cases/engine/08-direct-runtime-knobs/spec_decode_sampler_reference.py)
and from reference run outputs (cases/replay/02 and 09). The tests do not need the pack.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.runtime.rng import StdRng, poisson_arrival_times

OUTPUT_TOKEN_SEED = 0xD37A0A7E5EED

# First outputs of a fresh StdRng per seed (oracle: rustrand.StdRng).
FIRST_U32 = {
    0: [3442241407, 3140108210, 2384947579, 3321986196, 3476097558, 111001858],
    7: [1789459390, 130212073, 612261766, 1318925544, 260816077, 612643398],
    42: [572990626, 2261546851, 1068323197, 2330987027, 3729863889, 2733596785],
    OUTPUT_TOKEN_SEED: [952584220, 694593853, 2967053780, 2932165014, 2184908278, 3971079078],
}
FIRST_U64 = {
    0: [13486662071293341567, 14267822071968393595, 476749353381333526, 10775836403224147664],
    7: [559256596868823998, 5664742077951270790, 2631283358781127885, 10007675695454462105],
    42: [9713269763989775522, 10011513049433592189, 11740708795755607249, 7487565853151867058],
    OUTPUT_TOKEN_SEED: [
        2983257883590215708,
        12593552844572435924,
        17055654772024741366,
        15972626546770796678,
    ],
}
FIRST_F64 = {
    0: [0.7311134158637046, 0.7734601843532382, 0.025844634233355035, 0.5841592619362002],
    7: [0.030317360865101395, 0.3070862833742408, 0.14264215670077263, 0.5425171865271055],
    42: [0.5265574090027738, 0.5427252099031439, 0.6364650991438949, 0.4059017582307767],
    OUTPUT_TOKEN_SEED: [0.161722733923651, 0.6826978676698219, 0.9245888978495992, 0.8658778201154269],
}

# Reference arrival times of case replay/02-polynomial-poisson-sla (rate 40/s, seed 7,
# 30 requests), `arrival_time_ms` in its requests.jsonl; rustrand.poisson_arrivals(30, 40, 7)
# reproduces them exactly.
CASE02_ARRIVALS_MS = [
    0.0, 0.7696609292022754, 9.940905793637638, 13.788403145992572, 33.33880217478389,
    41.29224060472581, 116.75769626924844, 121.58098629586243, 128.9995928700916,
    132.344181002703, 164.47844594443455, 189.9418072054808, 190.46286284609786,
    192.68483395459407, 204.39067396317267, 229.1702914225852, 282.55310855015,
    337.5456156424813, 358.51773806984716, 375.91558515855513, 401.7061360667294,
    415.04658193490917, 426.93029266213375, 443.222378848155, 481.8843988000064,
    488.55816504990366, 496.37648059523787, 556.220117848459, 613.5952207119883,
    614.3041093965421,
]  # fmt: skip


def _future(rng: StdRng, n: int = 200) -> list[int]:
    """Draw n words; two generators in the same state give the same list."""
    return [rng.next_u32() for _ in range(n)]


@pytest.mark.parametrize("seed", sorted(FIRST_U32))
def test_first_next_u32(seed: int) -> None:
    rng = StdRng(seed)
    assert [rng.next_u32() for _ in range(6)] == FIRST_U32[seed]


@pytest.mark.parametrize("seed", sorted(FIRST_U64))
def test_first_next_u64(seed: int) -> None:
    rng = StdRng(seed)
    assert [rng.next_u64() for _ in range(4)] == FIRST_U64[seed]


@pytest.mark.parametrize("seed", sorted(FIRST_U64))
def test_next_u64_is_two_words_low_first(seed: int) -> None:
    w = FIRST_U32[seed]
    assert FIRST_U64[seed][:3] == [w[0] | (w[1] << 32), w[2] | (w[3] << 32), w[4] | (w[5] << 32)]


@pytest.mark.parametrize("seed", sorted(FIRST_F64))
def test_first_random_f64(seed: int) -> None:
    rng = StdRng(seed)
    values = [rng.random_f64() for _ in range(4)]
    assert values == FIRST_F64[seed]
    assert values == [(u >> 11) * 2.0**-53 for u in FIRST_U64[seed]]


def test_largest_seed_accepted_and_out_of_range_rejected() -> None:
    StdRng(2**64 - 1).next_u64()
    with pytest.raises(ValueError):
        StdRng(2**64)
    with pytest.raises(ValueError):
        StdRng(-1)


def test_next_u64_straddling_a_refill() -> None:
    # Seed 42 stream words (oracle): w62, w63, w64, w65, w128.
    w62, w63, w64, w65, w128 = 839921388, 3816013056, 3999709097, 3959822768, 2694004911
    rng = StdRng(42)
    words = [rng.next_u32() for _ in range(63)]
    assert words[62] == w62
    # One word left in the buffer: it is the low half, the high half is the refill's first word.
    assert rng.next_u64() == w63 | (w64 << 32) == 17178619768944704768
    assert rng.next_u32() == w65

    # The same words are seen through next_u32 only.
    plain = StdRng(42)
    words = [plain.next_u32() for _ in range(130)]
    assert words[63:66] == [w63, w64, w65]
    assert words[128] == w128

    # Exactly exhausting the buffer with u64s, then one more u64 from a fresh refill.
    even = StdRng(42)
    for _ in range(32):
        even.next_u64()
    assert even.next_u64() == w64 | (w65 << 32)


def test_mixed_draws_follow_one_word_stream() -> None:
    ref = StdRng(OUTPUT_TOKEN_SEED)
    stream = [ref.next_u32() for _ in range(600)]
    rng = StdRng(OUTPUT_TOKEN_SEED)
    pos = 0
    pattern = [1, 2, 2, 1, 2, 1, 1, 2]
    while pos < 590:
        for kind in pattern:
            if kind == 1:
                assert rng.next_u32() == stream[pos]
                pos += 1
            else:
                assert rng.next_u64() == stream[pos] | (stream[pos + 1] << 32)
                pos += 2


def test_random_range_seed0_n5() -> None:
    # 24 group-id draws random_range(0..5) with StdRng(0) (oracle: Canon's method on the
    # rustrand.StdRng u32 stream; runtime.md §2.2 "verified against 24 sessions / 5 groups").
    rng = StdRng(0)
    expected = [4, 3, 2, 3, 4, 0, 3, 2, 4, 1, 0, 3, 0, 1, 3, 3, 3, 3, 2, 4, 4, 4, 1, 0]
    assert [rng.random_range(5) for _ in range(24)] == expected


def test_random_range_seed0_n2_matches_case09_groups() -> None:
    # Case replay/09 (4 sessions, 2 prefix groups, structural seed 0): every session's first turn
    # reuses the shared 128-token group prefix, so all four sessions are in one group.
    rng = StdRng(0)
    assert [rng.random_range(2) for _ in range(4)] == [1, 1, 1, 1]


def _canon(words: list[int], n: int) -> tuple[int, int]:
    """Independent model of the 32-bit Canon draw; returns (value, words consumed)."""
    product = words[0] * n
    result, lo = product >> 32, product % 2**32
    if lo > (2**32 - n) % 2**32:
        if lo + ((words[1] * n) >> 32) >= 2**32:
            result += 1
        return result, 2
    return result, 1


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 1000, 2**31 + 1, 2**32 - 1, 2**32])
def test_random_range_consumption(n: int) -> None:
    stream = _future(StdRng(7), 400)
    rng = StdRng(7)
    pos = 0
    for _ in range(150):
        value = rng.random_range(n)
        expected, used = (stream[pos], 1) if n == 2**32 else _canon(stream[pos : pos + 2], n)
        assert value == expected
        assert 0 <= value < n
        pos += used
    assert rng.next_u32() == stream[pos]


def test_random_range_rejects_bad_n() -> None:
    rng = StdRng(0)
    for n in (0, -3, 2**32 + 1):
        with pytest.raises(ValueError):
            rng.random_range(n)


@pytest.mark.parametrize(
    ("seed", "p", "bits"),
    [
        # oracle: spec_decode_sampler_reference.bernoulli on ChaCha12Stream(seed), 40 draws
        (42, 0.5, "0001110011001101101001011101101000010111"),
        (7, 0.3, "1010101110011000000000001100100000010001"),
        (0, 0.85, "1111111110011011101111111100101001111111"),
    ],
)
def test_bernoulli_sequences(seed: int, p: float, bits: str) -> None:
    rng = StdRng(seed)
    assert "".join("1" if rng.bernoulli(p) else "0" for _ in range(40)) == bits


def test_bernoulli_threshold_and_consumption() -> None:
    # p == 1.0: always true, no draw.
    rng = StdRng(42)
    assert all(rng.bernoulli(1.0) for _ in range(10))
    assert rng.next_u64() == FIRST_U64[42][0]
    # p == 0.0: always false, but one u64 consumed per call.
    rng = StdRng(42)
    assert not rng.bernoulli(0.0)
    assert rng.next_u64() == FIRST_U64[42][1]
    # success iff u64 < floor(p * 2**64)
    for p in (0.5, 0.3, 0.6, 0.8, 1e-300, 1.0 - 2**-53):
        rng, ref = StdRng(0), StdRng(0)
        for _ in range(50):
            assert rng.bernoulli(p) == (ref.next_u64() < math.floor(p * 2.0**64))
    # straddles the buffer boundary like next_u64
    rng, ref = StdRng(0), StdRng(0)
    for _ in range(63):
        rng.next_u32()
        ref.next_u32()
    assert rng.bernoulli(0.5) == (ref.next_u64() < 2**63)
    assert _future(rng) == _future(ref)


def test_bernoulli_rejects_bad_p() -> None:
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            StdRng(0).bernoulli(p)


def _check_array_matches_sequential(seed: int, skip_u32: int, count: int) -> None:
    fast, slow = StdRng(seed), StdRng(seed)
    for _ in range(skip_u32):
        fast.next_u32()
        slow.next_u32()
    arr = fast.random_f64_array(count)
    assert isinstance(arr, np.ndarray)
    assert arr.dtype == np.float64
    assert arr.shape == (count,)
    assert arr.tolist() == [slow.random_f64() for _ in range(count)]
    # Same internal state afterwards: identical further draws of every kind.
    assert fast.next_u64() == slow.next_u64()
    assert fast.random_f64_array(37).tolist() == [slow.random_f64() for _ in range(37)]
    assert _future(fast, 300) == _future(slow, 300)


@pytest.mark.parametrize("seed", [0, OUTPUT_TOKEN_SEED])
@pytest.mark.parametrize("skip_u32", [0, 1, 3, 31, 62, 63, 64, 65, 127])
@pytest.mark.parametrize("count", [0, 1, 2, 16, 31, 32, 33, 64, 100, 1000])
def test_random_f64_array_equals_sequential(seed: int, skip_u32: int, count: int) -> None:
    _check_array_matches_sequential(seed, skip_u32, count)


def test_random_f64_array_literals() -> None:
    for seed, expected in FIRST_F64.items():
        assert StdRng(seed).random_f64_array(4).tolist() == expected


def test_random_f64_array_rejects_negative_count() -> None:
    with pytest.raises(ValueError):
        StdRng(0).random_f64_array(-1)


def test_random_f64_array_large_block_counters() -> None:
    # Exercise block counters past 2**32 (the high counter word) on both code paths.
    from servesim.runtime import rng as rng_mod

    key = StdRng(OUTPUT_TOKEN_SEED)._key
    start = 2**32 - 3
    blocks = rng_mod._chacha_blocks_array(key, start, 6).tolist()
    expected: list[int] = []
    for c in range(start, start + 6):
        expected += rng_mod._chacha_block(key, c)
    assert blocks == expected


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**64 - 1),
    skip_u32=st.integers(min_value=0, max_value=200),
    count=st.integers(min_value=0, max_value=700),
)
def test_random_f64_array_property(seed: int, skip_u32: int, count: int) -> None:
    _check_array_matches_sequential(seed, skip_u32, count)


def test_poisson_case02_arrivals_bit_exact() -> None:
    times = poisson_arrival_times(40, 30, 7)
    assert len(times) == 30
    assert all(type(t) is float for t in times)
    # Exact float equality (bit-exact): first request at 0.0, then accumulated exponential gaps.
    assert times == CASE02_ARRIVALS_MS


def test_poisson_prefix_property_and_edges() -> None:
    long = poisson_arrival_times(40, 2000, 7)
    assert long[:30] == CASE02_ARRIVALS_MS
    assert all(b >= a for a, b in zip(long, long[1:], strict=False))
    assert poisson_arrival_times(40, 0, 7) == []
    assert poisson_arrival_times(40, 1, 7) == [0.0]
    with pytest.raises(ValueError):
        poisson_arrival_times(0.0, 5, 7)


def test_poisson_uses_sequential_draws_and_accumulation() -> None:
    rate, seed, count = 8.0, 42, 500
    rng = StdRng(seed)
    t, expected = 0.0, [0.0]
    for _ in range(count - 1):
        u = min(max(1.0 - rng.random_f64(), 2.2250738585072014e-308), 1.0)
        t += -(1000.0 / rate) * math.log(u)
        expected.append(t)
    assert poisson_arrival_times(rate, count, seed) == expected
