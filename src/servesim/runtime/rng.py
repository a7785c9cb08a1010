"""Bit-exact model of the reference simulator's random number generator.

The reference draws all of its randomness (Poisson arrival gaps, synthetic prefix-group ids,
planned output token ids, speculative-decoding acceptance) from Rust ``rand`` 0.9 ``StdRng``
seeded with ``seed_from_u64``.  :class:`StdRng` reproduces that generator's output stream and the
derived samplers servesim needs, value for value, so that runs are reproducible against the
reference (tests/runtime/test_rng.py pins the streams value for value).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import accumulate, chain

import numpy as np
import numpy.typing as npt

__all__ = ["StdRng", "poisson_arrival_times", "poisson_arrivals"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF

# "expand 32-byte k" as four little-endian words.
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)

_ROUNDS = 12
_BLOCK_WORDS = 16
_BLOCKS_PER_REFILL = 4
_BUFFER_WORDS = _BLOCK_WORDS * _BLOCKS_PER_REFILL  # 64 u32 words per refill

_PCG_MUL = 6364136223846793005
_PCG_INC = 11634580027462260723

_F64_SCALE = 1.0 / float(1 << 53)
_BERNOULLI_SCALE = float(1 << 64)

_SMALLEST_NORMAL_F64 = 2.2250738585072014e-308


def _key_from_u64(seed: int) -> tuple[int, ...]:
    """Return the eight ChaCha key words that ``seed_from_u64(seed)`` produces."""
    state = seed
    words = []
    for _ in range(8):
        state = (state * _PCG_MUL + _PCG_INC) & _M64
        mixed = (((state >> 18) ^ state) >> 27) & _M32
        rot = state >> 59
        words.append(((mixed >> rot) | (mixed << ((32 - rot) & 31))) & _M32)
    return tuple(words)


def _chacha_block(key: tuple[int, ...], counter: int) -> list[int]:
    """Return the 16 output words of one ChaCha12 block (stream 0) for a 64-bit block counter."""
    m = _M32
    x0, x1, x2, x3 = _SIGMA
    x4, x5, x6, x7, x8, x9, x10, x11 = key
    x12 = counter & m
    x13 = (counter >> 32) & m
    x14 = 0
    x15 = 0
    init = (x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)

    for _ in range(_ROUNDS // 2):
        # Column round.
        x0 = (x0 + x4) & m; t = x12 ^ x0; x12 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x8 = (x8 + x12) & m; t = x4 ^ x8; x4 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x0 = (x0 + x4) & m; t = x12 ^ x0; x12 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x8 = (x8 + x12) & m; t = x4 ^ x8; x4 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        x1 = (x1 + x5) & m; t = x13 ^ x1; x13 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x9 = (x9 + x13) & m; t = x5 ^ x9; x5 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x1 = (x1 + x5) & m; t = x13 ^ x1; x13 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x9 = (x9 + x13) & m; t = x5 ^ x9; x5 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        x2 = (x2 + x6) & m; t = x14 ^ x2; x14 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x10 = (x10 + x14) & m; t = x6 ^ x10; x6 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x2 = (x2 + x6) & m; t = x14 ^ x2; x14 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x10 = (x10 + x14) & m; t = x6 ^ x10; x6 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        x3 = (x3 + x7) & m; t = x15 ^ x3; x15 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x11 = (x11 + x15) & m; t = x7 ^ x11; x7 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x3 = (x3 + x7) & m; t = x15 ^ x3; x15 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x11 = (x11 + x15) & m; t = x7 ^ x11; x7 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        # Diagonal round.
        x0 = (x0 + x5) & m; t = x15 ^ x0; x15 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x10 = (x10 + x15) & m; t = x5 ^ x10; x5 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x0 = (x0 + x5) & m; t = x15 ^ x0; x15 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x10 = (x10 + x15) & m; t = x5 ^ x10; x5 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        x1 = (x1 + x6) & m; t = x12 ^ x1; x12 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x11 = (x11 + x12) & m; t = x6 ^ x11; x6 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x1 = (x1 + x6) & m; t = x12 ^ x1; x12 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x11 = (x11 + x12) & m; t = x6 ^ x11; x6 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        x2 = (x2 + x7) & m; t = x13 ^ x2; x13 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x8 = (x8 + x13) & m; t = x7 ^ x8; x7 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x2 = (x2 + x7) & m; t = x13 ^ x2; x13 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x8 = (x8 + x13) & m; t = x7 ^ x8; x7 = ((t << 7) & m) | (t >> 25)  # noqa: E702

        x3 = (x3 + x4) & m; t = x14 ^ x3; x14 = ((t << 16) & m) | (t >> 16)  # noqa: E702
        x9 = (x9 + x14) & m; t = x4 ^ x9; x4 = ((t << 12) & m) | (t >> 20)  # noqa: E702
        x3 = (x3 + x4) & m; t = x14 ^ x3; x14 = ((t << 8) & m) | (t >> 24)  # noqa: E702
        x9 = (x9 + x14) & m; t = x4 ^ x9; x4 = ((t << 7) & m) | (t >> 25)  # noqa: E702

    out = (x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)
    return [(a + b) & m for a, b in zip(out, init, strict=True)]


def _rotl_array(v: npt.NDArray[np.uint32], n: int) -> npt.NDArray[np.uint32]:
    """Rotate every uint32 element left by ``n`` bits."""
    return (v << np.uint32(n)) | (v >> np.uint32(32 - n))


def _chacha_blocks_array(key: tuple[int, ...], first_counter: int, nblocks: int) -> npt.NDArray[np.uint32]:
    """Return the output words of ``nblocks`` consecutive ChaCha12 blocks as one flat uint32 array.

    The result is in stream order: block ``first_counter`` words 0..15, then the next block, etc.
    """
    counters = (np.uint64(first_counter) + np.arange(nblocks, dtype=np.uint64)).astype(np.uint64)
    init: list[npt.NDArray[np.uint32]] = []
    for word in (*_SIGMA, *key):
        init.append(np.full(nblocks, word, dtype=np.uint32))
    init.append((counters & np.uint64(_M32)).astype(np.uint32))
    init.append((counters >> np.uint64(32)).astype(np.uint32))
    init.append(np.zeros(nblocks, dtype=np.uint32))
    init.append(np.zeros(nblocks, dtype=np.uint32))

    x = [w.copy() for w in init]

    def quarter(a: int, b: int, c: int, d: int) -> None:
        x[a] += x[b]
        x[d] = _rotl_array(x[d] ^ x[a], 16)
        x[c] += x[d]
        x[b] = _rotl_array(x[b] ^ x[c], 12)
        x[a] += x[b]
        x[d] = _rotl_array(x[d] ^ x[a], 8)
        x[c] += x[d]
        x[b] = _rotl_array(x[b] ^ x[c], 7)

    for _ in range(_ROUNDS // 2):
        quarter(0, 4, 8, 12)
        quarter(1, 5, 9, 13)
        quarter(2, 6, 10, 14)
        quarter(3, 7, 11, 15)
        quarter(0, 5, 10, 15)
        quarter(1, 6, 11, 12)
        quarter(2, 7, 8, 13)
        quarter(3, 4, 9, 14)

    out = np.empty((nblocks, _BLOCK_WORDS), dtype=np.uint32)
    for i in range(_BLOCK_WORDS):
        out[:, i] = x[i] + init[i]
    return out.reshape(-1)


class StdRng:
    """Rust ``rand`` 0.9 ``StdRng`` (ChaCha12) seeded with ``seed_from_u64``, reproduced bit for bit.

    All draw methods consume the generator's output stream exactly as the corresponding ``rand``
    0.9 calls do, so interleaving them yields the same values as the reference.
    """

    __slots__ = ("_key", "_counter", "_buf", "_idx")

    def __init__(self, seed: int) -> None:
        """Create the generator that ``StdRng::seed_from_u64(seed)`` creates (seed in 0..2**64-1)."""
        seed = int(seed)
        if not 0 <= seed <= _M64:
            raise ValueError(f"seed must be in 0..2**64-1, got {seed}")
        self._key: tuple[int, ...] = _key_from_u64(seed)
        self._counter: int = 0  # next block counter to generate
        self._buf: list[int] = []  # last generated 64-word buffer
        self._idx: int = _BUFFER_WORDS  # index of the next unread word; == 64 means exhausted

    def _refill(self) -> None:
        """Generate the next four blocks into the word buffer and rewind the read index."""
        key = self._key
        c = self._counter
        buf = _chacha_block(key, c)
        buf += _chacha_block(key, (c + 1) & _M64)
        buf += _chacha_block(key, (c + 2) & _M64)
        buf += _chacha_block(key, (c + 3) & _M64)
        self._buf = buf
        self._counter = (c + _BLOCKS_PER_REFILL) & _M64
        self._idx = 0

    def next_u32(self) -> int:
        """Return the next 32-bit output word (``RngCore::next_u32``)."""
        if self._idx >= _BUFFER_WORDS:
            self._refill()
        v = self._buf[self._idx]
        self._idx += 1
        return v

    def next_u64(self) -> int:
        """Return the next 64-bit output (``RngCore::next_u64``): two words, the first is the low half."""
        idx = self._idx
        if idx < _BUFFER_WORDS - 1:
            buf = self._buf
            self._idx = idx + 2
            return buf[idx] | (buf[idx + 1] << 32)
        if idx >= _BUFFER_WORDS:
            self._refill()
            buf = self._buf
            self._idx = 2
            return buf[0] | (buf[1] << 32)
        lo = self._buf[idx]
        self._refill()
        self._idx = 1
        return lo | (self._buf[0] << 32)

    def random_f64(self) -> float:
        """Return a uniform float in [0, 1) with 53 random bits (``rng.random::<f64>()``)."""
        return (self.next_u64() >> 11) * _F64_SCALE

    def random_range(self, n: int) -> int:
        """Return a uniform integer in [0, n) as ``rng.random_range(0..n)`` does for n in 1..2**32."""
        if not 1 <= n <= (1 << 32):
            raise ValueError(f"random_range needs n in 1..2**32, got {n}")
        if n == (1 << 32):
            # The u32 range wraps to 0: rand returns a full-width draw.
            return self.next_u32()
        product = self.next_u32() * n
        result = product >> 32
        lo = product & _M32
        if lo > ((1 << 32) - n) & _M32:
            hi2 = (self.next_u32() * n) >> 32
            if lo + hi2 > _M32:
                result += 1
        return result

    def bernoulli(self, p: float) -> bool:
        """Return one ``Bernoulli(p)`` sample as rand 0.9 draws it (p in [0, 1])."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Bernoulli probability must be in [0, 1], got {p}")
        if p == 1.0:
            return True
        threshold = int(p * _BERNOULLI_SCALE)
        return self.next_u64() < threshold

    def random_f64_array(self, count: int) -> npt.NDArray[np.float64]:
        """Return ``count`` successive :meth:`random_f64` values as a float64 array.

        Leaves the generator in the same state as ``count`` individual calls would.
        """
        if count < 0:
            raise ValueError(f"count must be non-negative, got {count}")
        if count == 0:
            return np.empty(0, dtype=np.float64)
        needed = 2 * count  # u32 words; each u64 is the next two words of the stream
        available = _BUFFER_WORDS - self._idx if self._idx < _BUFFER_WORDS else 0
        if needed <= available:
            head = np.array(self._buf[self._idx : self._idx + needed], dtype=np.uint64)
            self._idx += needed
            words = head
        else:
            head_list = self._buf[self._idx :] if available else []
            missing = needed - available
            refills = -(-missing // _BUFFER_WORDS)
            nblocks = refills * _BLOCKS_PER_REFILL
            fresh = _chacha_blocks_array(self._key, self._counter, nblocks)
            self._counter = (self._counter + nblocks) & _M64
            self._buf = fresh[-_BUFFER_WORDS:].tolist()
            self._idx = missing - (refills - 1) * _BUFFER_WORDS
            words = np.concatenate(
                (np.array(head_list, dtype=np.uint64), fresh[:missing].astype(np.uint64))
            )
        u64 = words[0::2] | (words[1::2] << np.uint64(32))
        return (u64 >> np.uint64(11)).astype(np.float64) * _F64_SCALE


def poisson_arrival_times(rate_per_s: float, count: int, seed: int) -> list[float]:
    """Return the reference's open-loop Poisson arrival times (ms) for ``count`` requests.

    The first request arrives at 0.0; each later one follows an exponential gap with mean
    ``1000 / rate_per_s`` ms drawn from ``StdRng(seed)``.
    """
    return list(poisson_arrivals(rate_per_s, count, seed))


_CHUNK = 1 << 16


def poisson_arrivals(rate_per_s: float, count: int, seed: int) -> Iterator[float]:
    """`poisson_arrival_times` made as they are read, a chunk of draws at a time."""
    return chain.from_iterable(_poisson_chunks(rate_per_s, count, seed))


def _poisson_chunks(rate_per_s: float, count: int, seed: int) -> Iterator[list[float]]:
    """The arrival times in lists: the first arrival, then up to `_CHUNK` at a time."""
    if count <= 0:
        return
    if not rate_per_s > 0.0 or not math.isfinite(rate_per_s):
        raise ValueError(f"rate_per_s must be positive and finite, got {rate_per_s}")
    neg_mean = -(1000.0 / rate_per_s)
    rng = StdRng(seed)
    t = 0.0
    yield [t]
    left = count - 1
    while left:
        n = min(left, _CHUNK)
        left -= n
        u = np.clip(1.0 - rng.random_f64_array(n), _SMALLEST_NORMAL_F64, 1.0)
        # math.log (the platform libm, like Rust's f64::ln) and not np.log: numpy's vectorised log
        # differs from libm in the last bit for a fraction of inputs.
        gaps = (neg_mean * np.fromiter(map(math.log, u.tolist()), dtype=np.float64, count=n)).tolist()
        times = list(accumulate(gaps, initial=t))  # sequential float addition, as the reference accumulates
        t = times[-1]
        del times[0]
        yield times
