"""The replay loop's handler: where requests go and what a finished pass means for them.

`base.Cluster` is what both topologies share; `AggregatedCluster` places every request on one
pool; `DisaggregatedCluster` moves each request from a prefill pool to a decode pool through
the reference's KV handoff. `sampling.StateSampling` observes every finished pass for the
report's time series.
"""

from typing import TYPE_CHECKING

from servesim.cluster.aggregated import AggregatedCluster
from servesim.cluster.base import Cluster

if TYPE_CHECKING:
    from servesim.cluster.disaggregated import DisaggregatedCluster

__all__ = ["AggregatedCluster", "Cluster", "DisaggregatedCluster"]


def __getattr__(name: str) -> object:
    """`DisaggregatedCluster`, imported on first use (start-up time of aggregated runs)."""
    if name == "DisaggregatedCluster":
        from servesim.cluster.disaggregated import DisaggregatedCluster

        return DisaggregatedCluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
