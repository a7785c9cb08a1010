"""`Measured`: the per-request timings of one real serving run, as arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from servesim.report.latency import LatencySamples


def _empty() -> np.ndarray:
    return np.zeros(0)


@dataclass(frozen=True)
class Measured:
    """The completed requests of one real run, sorted by send time, and the send times of the
    requests that failed.

    Times are seconds on the run's own clock; token counts are -1 where the source did not
    record them (only possible when the file was read with ``replayable=False``).
    """

    path: str
    format: str
    """The format it was read as: "llmservingsim" (per-request JSONL), "aiperf" or "vllm"."""
    send_s: np.ndarray
    first_s: np.ndarray
    end_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    failed_send_s: np.ndarray = field(default_factory=_empty)
    """Send times of the requests that did not complete (an error, no first token)."""
    token_gaps_ms: np.ndarray | None = None
    """Every inter-token gap of every completed request, when the source records them."""
    reported: dict[str, float] | None = None
    """Throughputs the source reports itself, when it has no per-request send times (then every
    `send_s` is 0: each request timed from its own start)."""

    def __len__(self) -> int:
        return len(self.send_s)

    @property
    def failed(self) -> int:
        return len(self.failed_send_s)

    @property
    def num_requests(self) -> int:
        """Completed and failed requests."""
        return len(self) + self.failed

    def latencies(self) -> dict[str, np.ndarray]:
        """TTFT, TPOT and E2E in ms per completed request, in send order (TPOT is NaN below 2
        tokens or where the output length is unknown)."""
        steps = (self.output_tokens - 1).astype(float)
        steps[steps < 1] = np.nan
        return {
            "ttft": (self.first_s - self.send_s) * 1000,
            "tpot": (self.end_s - self.first_s) * 1000 / steps,
            "e2e": (self.end_s - self.send_s) * 1000,
        }

    def latency(self) -> LatencySamples:
        """The latency samples, defined as for a simulation (ITL: the token gaps when the source
        has them, else each request's TPOT)."""
        from servesim.report.latency import LatencySamples

        lat = self.latencies()
        tpot = lat["tpot"][np.isfinite(lat["tpot"])]
        sends = np.concatenate([self.send_s, self.failed_send_s])
        start = float(sends.min()) if len(sends) else 0.0
        gaps = self.token_gaps_ms
        return LatencySamples(ttft_ms=np.maximum(lat["ttft"], 0.0), tpot_ms=tpot, e2e_ms=lat["e2e"],
                              itl_ms=gaps if gaps is not None else tpot, itl_weights=None,
                              arrival_ms=(np.sort(sends) - start) * 1000, completion_ms=(self.end_s - start) * 1000,
                              itl_per_request=gaps is None)

    def throughput(self) -> dict[str, float]:
        """Completed requests and output tokens per second over the run's span (or the source's
        own figures when it has no send times)."""
        if self.reported is not None:
            return dict(self.reported)
        if not len(self):
            return {}
        span_s = float(self.end_s.max()) - float(np.concatenate([self.send_s, self.failed_send_s]).min())
        if span_s <= 0:
            return {}
        tokens = self.output_tokens[self.output_tokens >= 0]
        return {"request_throughput_rps": len(self) / span_s, "output_throughput_tok_s": float(tokens.sum()) / span_s}

    def mooncake_rows(self) -> list[dict[str, Any]]:
        """The run as a Mooncake trace: send offsets in ms, lengths, a private prompt per request."""
        origin = float(self.send_s[0]) if len(self) else 0.0
        rows, next_id = [], 0
        for send, isl, osl in zip(self.send_s, self.input_tokens, self.output_tokens, strict=True):
            blocks = max(1, -(-int(isl) // 512))
            rows.append({"timestamp": round((float(send) - origin) * 1000, 6), "input_length": int(isl),
                         "output_length": max(1, int(osl)), "hash_ids": list(range(next_id, next_id + blocks))})
            next_id += blocks
        return rows
