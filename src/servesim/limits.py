"""Limits on absurd values, in one place (servesim's own: the reference accepts such values and
then fails, hangs or exhausts memory). Every realistic deployment and workload is far inside.
"""

MAX_MS = 1e12
"""Longest simulated time span, in milliseconds (31.7 years): up to there float64 milliseconds
keep sub-microsecond resolution (beyond, a 1 ms step can vanish in rounding)."""
MAX_WORKERS = 100_000
"""Most workers (and scheduler ranks) in one pool, and the largest parallelism degree."""
MAX_REQUESTS = 100_000_000
"""Most requests one synthetic run may hold (sessions x turns for sessions)."""
MAX_TURNS = 100_000
"""Most turns of one synthetic session."""
MAX_TOKENS = 1_000_000_000
"""Largest prompt or output length of one request, and largest token budget (keeps the
generated-token value space, 2**60 wide, from ever running out)."""

# recommend's search spaces (counted before anything is built)
MAX_DOMAIN_VALUES = 100_000
"""Most values one range domain of a recommend knob may hold (`(max - min) / step + 1`; an
integer log range: `max - min + 1`)."""
MAX_CANDIDATE_GPUS = 100_000
"""Largest `optimization.constraints.max_candidate_gpus` (the default parallel pools hold every
replica count within it)."""
MAX_POOL_SHAPES = 100_000
"""Most parallel shapes one role's `preset: false` pool may hold (the product of its knobs'
value counts)."""
