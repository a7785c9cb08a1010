"""Speculative decoding (MTP / EAGLE): how many tokens one decode step of a request emits."""

from __future__ import annotations

from servesim.engine.rank import SpeculativeSettings
from servesim.runtime.rng import StdRng


class DraftSampler:
    """One rank's acceptance sampler: a step emits 1 + the leading accepted draft tokens.

    Draft i is accepted with probability ``acceptance_rates[i]`` given that the drafts before it
    were; the draws come from the rank's own generator (seeded with ``seed + seed_offset``).
    """

    def __init__(self, settings: SpeculativeSettings, seed_offset: int) -> None:
        self.settings = settings
        self.max_burst = settings.nextn + 1
        """The most tokens one step can emit."""
        self._rng = StdRng((settings.seed + seed_offset) % (1 << 64))

    def burst(self, left: int) -> int:
        """Tokens the next step of a request emits, within the `left` it may still produce."""
        rng = self._rng
        burst = 1
        for rate in self.settings.acceptance_rates:
            if not rng.bernoulli(rate):
                break
            burst += 1
        return min(burst, left)
