"""SGLang's queue order and servesim's test for requests no idle rank could ever admit."""

from __future__ import annotations

from collections import deque

from servesim.engine.cache.radix import RadixCache
from servesim.engine.rank import LPM_PREFIX, SglangSettings, lpm_span
from servesim.engine.sglang.kv import SgRequest

LPM_MAX_WAITING = 128
"""LPM falls back to FIFO above this many waiting requests."""


def lpm_order(waiting: deque[SgRequest], cache: RadixCache) -> deque[SgRequest]:
    """The waiting queue in longest-prefix-match order.

    Longest radix match (of the full pages of each request's sequence) first, except that a
    request with at most 32 tokens cached whose first 32 tokens (rounded up to pages) repeat
    those of an earlier such request goes last. A stable, permanent reordering; the queue is
    returned as it is above 128 waiting requests and without prefix caching.
    """
    if len(waiting) > LPM_MAX_WAITING or len(waiting) < 2 or not cache.caching:
        return waiting
    page = cache.page
    span = lpm_span(page)
    seen: set[tuple[int, ...]] = set()
    keyed = []
    for r in waiting:
        length = r.length
        match = cache.match_len(r.seq, length - length % page)
        late = False
        if match <= LPM_PREFIX and length >= span:
            if r.lpm_key is None:
                r.lpm_key = r.seq.tokens(0, span)
            late = r.lpm_key in seen
            seen.add(r.lpm_key)
        keyed.append((late, -match, r))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return deque(item[2] for item in keyed)


def never_admissible(r: SgRequest, settings: SglangSettings, page: int, clip: int, total_tokens: int) -> str | None:
    """Why `r` fails admission even on an idle rank with full budgets (None if it does not).

    `clip` caps the output tokens admission reserves; `total_tokens` is the pool's size."""
    extend = r.length - r.materialized
    chunk = extend if extend <= settings.chunked_prefill_size else settings.chunked_prefill_size // page * page
    if chunk == 0:
        return f"chunked_prefill_size {settings.chunked_prefill_size} is smaller than one page ({page})"
    charged = -(-chunk // page) * page
    out = min(r.remaining_output(), clip) if chunk == extend else 0
    room = total_tokens - r.pages * page
    if charged + out >= room:
        return (f"its next {charged} prompt tokens + {out} reserved output tokens do not fit "
                f"below the {room} KV tokens an idle rank could give it")
    if charged > settings.max_prefill_tokens or charged > settings.chunked_prefill_size:
        return (f"a prefill chunk of {charged} tokens exceeds max_prefill_tokens "
                f"{settings.max_prefill_tokens} or chunked_prefill_size {settings.chunked_prefill_size}")
    return None
