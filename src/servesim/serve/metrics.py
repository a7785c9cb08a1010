"""vLLM's Prometheus metrics of the simulated engine (`GET /metrics`), in the text format.

Latencies are simulated seconds (what the engine would measure); with `--speed` they differ
from the wall time a client sees by that factor.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from servesim.cluster.base import Cluster
from servesim.collect.collector import RequestRecord, Status
from servesim.engine.worker import Worker, WorkerPass
from servesim.serve.session import Session

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
"""vLLM's buckets (seconds)."""


class Histogram:
    """Counts per bucket (cumulative only when rendered), the sum and the count."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.n += times

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


class EngineMetrics:
    """Counters and histograms fed as the simulation runs; gauges read from the cluster."""

    def __init__(self, cluster: Cluster, model: str) -> None:
        self.cluster = cluster
        self.labels = f'model_name="{model}",engine="0"'
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        self.finished: dict[str, int] = {}

    def on_tokens(self, session: Session, count: int, now: float) -> None:
        """`count` tokens of `session` at simulated `now` (ms)."""
        self.generation_tokens += count
        if session.first_ms is None:
            self.ttft.observe((now - session.sent_ms) / 1000)
            count -= 1
        if count > 0:
            gap = (now - (session.last_ms if session.last_ms is not None else now)) / 1000
            self.itl.observe(gap, 1)
            if count > 1:
                self.itl.observe(0.0, count - 1)  # tokens of one pass (speculative decoding)

    def on_pass_end(self, label: str, worker: Worker, outcome: WorkerPass, now: float) -> None:
        for _rank, result in outcome.ranks:
            self.preemptions += result.preemptions
            for request, reused in result.admitted:
                self.prefix_queries += request.prompt_len
                self.prefix_hits += reused

    def on_placed(self, *args: object) -> None:
        pass

    def on_ended(self, record: RequestRecord, now: float) -> None:
        self.prompt_tokens += record.input_length
        if record.status is Status.COMPLETED:
            self.finished["length"] = self.finished.get("length", 0) + 1
            self.e2e.observe((now - record.arrival_ms) / 1000)
        else:
            reason = "abort" if record.status is Status.TIMED_OUT else "error"
            self.finished[reason] = self.finished.get(reason, 0) + 1

    def render(self) -> str:
        """The Prometheus text exposition."""
        running = waiting = used = total = 0
        for pool in self.cluster.pools.values():
            for worker in pool.workers:
                for rank in worker.ranks:
                    busy = rank.num_running()
                    running += busy
                    waiting += rank.num_requests() - busy
                    used += rank.pool.active_blocks
                    total += rank.pool.num_blocks
        labels = self.labels
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: list[str]) -> None:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples))

        family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
               [f"vllm:num_requests_running{{{labels}}} {running}"])
        family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
               [f"vllm:num_requests_waiting{{{labels}}} {waiting}"])
        family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
               [f"vllm:kv_cache_usage_perc{{{labels}}} {used / total if total else 0.0!r}"])
        for name, value, text in (
                ("vllm:prefix_cache_queries", self.prefix_queries, "Prefix cache queries, in terms of tokens."),
                ("vllm:prefix_cache_hits", self.prefix_hits, "Prefix cache hits, in terms of tokens."),
                ("vllm:num_preemptions", self.preemptions, "Cumulative number of preemptions."),
                ("vllm:prompt_tokens", self.prompt_tokens, "Number of prefill tokens processed."),
                ("vllm:generation_tokens", self.generation_tokens, "Number of generation tokens processed.")):
            family(name, "counter", text, [f"{name}_total{{{labels}}} {value}"])
        family("vllm:request_success", "counter", "Count of finished requests by finish reason.",
               [f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {count}'
                for reason, count in sorted(self.finished.items())])
        for name, histogram, text in (
                ("vllm:time_to_first_token_seconds", self.ttft, "Histogram of time to first token in seconds."),
                ("vllm:inter_token_latency_seconds", self.itl, "Histogram of inter-token latency in seconds."),
                ("vllm:e2e_request_latency_seconds", self.e2e, "Histogram of e2e request latency in seconds.")):
            family(name, "histogram", text, histogram.lines(name, labels))
        return "\n".join(lines) + "\n"
