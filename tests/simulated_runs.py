"""A simulated run seen as a real one: servesim's own per-request timeline as measurements."""

from __future__ import annotations

import numpy as np

from servesim import simulate
from servesim.measured import Measured


def measured_from(config: dict) -> Measured:
    """The completed requests of `config`'s run as a `Measured` run (send, first-token, end times)."""
    report = simulate(config, capture_per_request=True)
    rows = [r for r in report.per_request if r["terminal_status"] == "completed"]
    send = np.array([r["arrival_time_ms"] for r in rows]) / 1000
    return Measured("synthetic", "test", send, send + np.array([r["ttft_ms"] for r in rows]) / 1000,
                    send + np.array([r["e2e_latency_ms"] for r in rows]) / 1000,
                    np.array([r["input_length"] for r in rows]), np.array([r["output_length"] for r in rows]))
