"""The KV cache's upstream AISimulate 0.13 tiers and state (`kv_cache.host_offload`,
`kv_cache.g3_offload`, `kv_cache.state_cache`): their keys and the rules each checks alone; the
rules across keys live with `KvCacheConfig` and `EngineConfig` (`config.engine`)."""

from typing import Any, Literal

from pydantic import field_validator

from servesim.config.fields import ByteCount, NonNegativeNumber, PositiveInt, SchemaModel


class StateCacheConfig(SchemaModel):
    """Upstream 0.13 key: the per-request recurrent state of a hybrid (Mamba / linear-attention) model, held in the KV pool."""

    bytes_per_request: ByteCount | None = None
    """Upstream 0.13 key: state bytes per request per rank (a strict integer in 1..2^64-1). A running request holds S = ceil(bytes / (block_size x bytes_per_token)) pool blocks for its state and, from the pass after its first pass that ends on a block boundary, S more for the state's copy kept there; prefix caching is off. Required by servesim (0.13 estimates it from a hybrid model's config when omitted; servesim does not)."""
    mamba_cache_dtype: Literal["auto", "float16", "float32"] = "auto"
    """Upstream 0.13 key: dtype of the estimated Mamba state; only used when bytes_per_request is omitted (so not by servesim)."""
    indexer_cache_dtype: Literal["auto", "fp8", "mxfp4"] = "auto"
    """Upstream 0.13 key: dtype of the estimated indexer cache; only used when bytes_per_request is omitted (so not by servesim)."""

    def state_blocks(self, block_bytes: int) -> int:
        """Pool blocks one request's state takes: ceil(bytes_per_request / block_bytes)."""
        assert self.bytes_per_request is not None
        return -(-self.bytes_per_request // block_bytes)


class HostOffloadConfig(SchemaModel):
    """Upstream 0.13 key: G2, a host-memory KV tier behind each rank's GPU pool (vLLM only)."""

    scope: Literal["dp_rank_local", "cluster_shared"] = "dp_rank_local"
    """Upstream 0.13 key: 'dp_rank_local' = a host cache per scheduler (DP) rank; 'cluster_shared' = one pool for every rank of the role's workers, loading over one shared link whose bandwidth the loads in flight share."""
    num_host_blocks: PositiveInt
    """Upstream 0.13 key: host blocks per rank, or (cluster_shared) of the whole pool (of block_size x bytes_per_token bytes each)."""
    d2h_bandwidth_gbps: NonNegativeNumber = 32.0
    """Upstream 0.13 key: device-to-host bandwidth in GB/s (0 = unlimited): a pass's new host blocks go out as one store job at its end (bytes one job after another, then latency_to_first_byte_ms); a pass that reuses one of those GPU blocks before the job completes waits for it (not with cluster_shared, see docs/upstream013.md)."""
    h2d_bandwidth_gbps: NonNegativeNumber = 32.0
    """Upstream 0.13 key: host-to-device bandwidth in GB/s (0 = unlimited): the loads of a rank move their n x block bytes one after another at this rate, each also waiting latency_to_first_byte_ms (latencies overlap); unused with cluster_shared."""
    shared_d2h_bandwidth_gbps: NonNegativeNumber = 80.0
    """Upstream 0.13 key: cluster_shared store bandwidth in GB/s (stores cost no time in servesim, see docs/upstream013.md)."""
    shared_h2d_bandwidth_gbps: NonNegativeNumber = 80.0
    """Upstream 0.13 key: cluster_shared load bandwidth in GB/s (0 = unlimited), shared equally by the loads in flight (each also waits latency_to_first_byte_ms)."""
    latency_to_first_byte_ms: NonNegativeNumber = 0.0
    """Upstream 0.13 key: fixed latency of every host-to-device load, in ms."""

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, value: Any) -> Any:
        """'worker_local' is a G3 scope."""
        if value == "worker_local":
            raise ValueError("'worker_local' is a g3_offload scope; use 'dp_rank_local' for per-DP-rank host caches")
        return value


class G3OffloadConfig(SchemaModel):
    """Upstream 0.13 key: G3, a disk KV tier behind host memory (needs host_offload; aggregated workers without attention DP)."""

    scope: Literal["worker_local", "cluster_shared"]
    """Upstream 0.13 key: 'worker_local' = one disk cache per worker; 'cluster_shared' = one disk pool for the role's workers, read over one link the reads in flight share."""
    num_g3_blocks: PositiveInt
    """Upstream 0.13 key: disk blocks per worker, or (cluster_shared) of the whole pool."""
    latency_to_first_byte_ms: NonNegativeNumber = 0.1
    """Upstream 0.13 key: fixed latency of every disk read and write job, in ms (the latencies of jobs in flight together overlap)."""
    read_bandwidth_gbps: NonNegativeNumber = 10.0
    """Upstream 0.13 key: disk-to-host bandwidth in GB/s (0 = unlimited); reads move their bytes one after another."""
    write_bandwidth_gbps: NonNegativeNumber = 10.0
    """Upstream 0.13 key: host-to-disk bandwidth in GB/s (writes cost no simulated time; counted in the g3_offload summary)."""
    shared_read_bandwidth_gbps: NonNegativeNumber = 80.0
    """Upstream 0.13 key: cluster_shared read bandwidth in GB/s: a read moves at the lower of this and read_bandwidth_gbps (0 = unlimited), sharing it with the reads in flight."""
    shared_write_bandwidth_gbps: NonNegativeNumber = 80.0
    """Upstream 0.13 key: cluster_shared write bandwidth in GB/s: writes count the lower of this and write_bandwidth_gbps (they cost no simulated time)."""



class KvcrConfig(SchemaModel):
    """Upstream 0.13 key: KVCR, the peer G2 fetch — a rank pulls a prefix a KV hint names from another rank's host tier (needs host_offload, dp_rank_local; not with g3_offload)."""

    latency_to_first_byte_ms: NonNegativeNumber = 1.0
    """Upstream 0.13 key: fixed latency of a peer pull, in ms (no pull happens in predict, see docs/upstream013.md)."""
    bandwidth_gbps: NonNegativeNumber = 50.0
    """Upstream 0.13 key: peer-to-peer bandwidth of a pull, in GB/s (no pull happens in predict, see docs/upstream013.md)."""


KVCR_SUMMARY_ZERO: dict[str, Any] = {"blocks": 0, "bytes": 0, "loaded_blocks": 0, "pulls": {"partial": 0, "success": 0},
                                     "remote_deliver_ms": 0.0, "source_wait_ms": 0.0}
"""0.13's `kvcr` summary section of a run without pulls (every predict run: nothing authors KV hints)."""


def tier_problems(host: HostOffloadConfig | None, g3: G3OffloadConfig | None,
                  kvcr: KvcrConfig | None) -> list[tuple[str, str]]:
    """The rules across one kv_cache's tiers, as (key, rule): G3 and KVCR sit behind a host tier,
    KVCR behind a rank-local one and not with G3 (0.13's rules); G3 behind a shared host pool is
    not built."""
    problems = []
    if g3 is not None and host is None:
        problems.append(("g3_offload", "requires host_offload"))
    if kvcr is not None and (host is None or host.scope != "dp_rank_local"):
        problems.append(("kvcr", "requires host_offload with scope dp_rank_local"))
    if g3 is not None and host is not None and host.scope == "cluster_shared":
        problems.append(("g3_offload", "behind a cluster_shared host_offload is not built in servesim "
                                       "(use host_offload.scope: dp_rank_local)"))
    if kvcr is not None and g3 is not None:
        problems.append(("kvcr", "cannot be combined with g3_offload"))
    return problems
