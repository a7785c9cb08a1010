"""Agentic graph rules (traffic/agentic.py): nodes sorted by request id, not-before times shifted
so the smallest is 0 and divided (with every delay) by the speedup, dependencies sorted by
parent, a delay of exactly 0 allowed and a negative one refused, self, unknown and cross-play
parents refused, cycles found (the earliest line named), a component named after its first root
(no dependencies, then the smallest not-before, then id), and the summary block."""

from __future__ import annotations

from array import array

import pytest

from servesim.errors import TraceError
from servesim.traffic.agentic import AgenticNode, Dependency, build_graph, legacy_play_ids


def _node(rid: str, not_before: float = 0.0, deps=(), play: str = "p", line: int = 0, model: str = "m") -> AgenticNode:
    dependencies = [Dependency(parent, "completion", delay, "sequence") for parent, delay in deps]
    return AgenticNode(rid, play, "s", model, 16, 4, array("Q", [1]), not_before, dependencies, line=line)


def _graph(nodes, speedup=1.0):
    return build_graph(nodes, 16, "fmt", "digest", "trace.jsonl", speedup=speedup)


def test_nodes_are_sorted_by_request_id_and_times_start_at_zero():
    graph = _graph([_node("c", 500.0), _node("a", 300.0), _node("b", 900.0)])
    assert [n.request_id for n in graph.nodes] == ["a", "b", "c"]
    assert [n.not_before_ms for n in graph.nodes] == [0.0, 600.0, 200.0]


def test_a_speedup_divides_times_and_delays():
    graph = _graph([_node("a", 100.0), _node("b", 500.0, deps=[("a", 30.0)])], speedup=2.0)
    assert [n.not_before_ms for n in graph.nodes] == [0.0, 200.0]
    assert graph.nodes[1].dependencies[0].delay_ms == 15.0
    plain = _graph([_node("a", 100.0), _node("b", 500.0, deps=[("a", 30.0)])])
    assert plain.nodes[1].dependencies[0].delay_ms == 30.0


def test_dependencies_are_sorted_by_parent_and_edges_resolved():
    graph = _graph([_node("a"), _node("b"), _node("c", deps=[("b", 1.0), ("a", 2.0)])])
    assert [d.parent for d in graph.nodes[2].dependencies] == ["a", "b"]
    assert [(j, d.parent) for j, d in graph.parents[2]] == [(0, "a"), (1, "b")]
    assert [i for i, _ in graph.children[0]] == [2] and [i for i, _ in graph.children[1]] == [2]
    assert graph.parents[0] == [] and graph.children[2] == []


def test_a_zero_delay_is_allowed_and_a_negative_one_refused():
    assert _graph([_node("a"), _node("b", deps=[("a", 0.0)])]).num_requests == 2
    with pytest.raises(TraceError, match="request b has invalid dependency delay -1 ms on a"):
        _graph([_node("a"), _node("b", deps=[("a", -1.0)], line=7)])
    with pytest.raises(TraceError, match="invalid dependency delay"):
        _graph([_node("a"), _node("b", deps=[("a", float("nan"))])])


@pytest.mark.parametrize(("nodes", "message"), [
    ([_node("a", deps=[("a", 0.0)], line=3)], "trace.jsonl:3: request a cannot depend on itself"),
    ([_node("a", deps=[("zz", 0.0)], line=2)], "trace.jsonl:2: request a references unknown request_id zz"),
    ([_node("a", play="p"), _node("b", play="q", deps=[("a", 0.0)], line=4)],
     "trace.jsonl:4: request b in play q depends on request a in play p"),
])
def test_bad_parents_are_errors_naming_the_line(nodes, message):
    with pytest.raises(TraceError) as info:
        _graph(nodes)
    assert str(info.value) == message


def test_a_cycle_names_the_blocked_requests_and_the_earliest_line():
    nodes = [_node("r"), _node("a", deps=[("c", 0.0)], line=9), _node("b", deps=[("a", 0.0)], line=4),
             _node("c", deps=[("b", 0.0)], line=6), _node("d", deps=[("c", 0.0)], line=2)]
    with pytest.raises(TraceError) as info:
        _graph(nodes)
    assert str(info.value) == ("trace.jsonl:2: cycle detected among 4 agentic requests; "
                               "blocked request IDs: a, b, c, d")


def test_a_diamond_is_not_a_cycle():
    graph = _graph([_node("a"), _node("b", deps=[("a", 0.0)]), _node("c", deps=[("a", 0.0)]),
                    _node("d", deps=[("b", 0.0), ("c", 0.0)])])
    assert graph.num_requests == 4


def test_a_component_is_named_after_its_first_root():
    nodes = [_node("x", 50.0), _node("b", 10.0, deps=[("x", 0.0)]), _node("y", 50.0, deps=[("b", 0.0)]),
             _node("a", 50.0, deps=[("y", 0.0)]), _node("w", 70.0), _node("v", 70.0)]
    legacy_play_ids(nodes, "play-")
    # a root (no dependencies) wins over an earlier dependent node; equal times: the smaller id
    assert [n.play_id for n in nodes] == ["play-x"] * 4 + ["play-w", "play-v"]
    joined = [_node("q", 5.0), _node("p", 5.0), _node("j", 1.0, deps=[("q", 0.0), ("p", 0.0)])]
    legacy_play_ids(joined, "")
    assert [n.play_id for n in joined] == ["p", "p", "p"]


def test_a_component_without_roots_is_named_consistently():
    nodes = [_node("b", 3.0, deps=[("a", 0.0)]), _node("a", 2.0, deps=[("b", 0.0)]), _node("c", 0.0, deps=[("nope", 0.0)])]
    legacy_play_ids(nodes, "")
    assert [n.play_id for n in nodes] == ["a", "a", "c"], "an unknown parent is ignored here"


def test_play_ids_sizes_and_the_summary_block():
    graph = _graph([_node("c", play="q", model="m2"), _node("a", play="p"), _node("b", play="q")])
    assert graph.play_ids == ["p", "q"] and graph.play_sizes() == {"p": 1, "q": 2}
    block = graph.report_block()
    assert block["node_count"] == 3 and block["play_count"] == 2 and block["block_size"] == 16
    assert block["source"] == {"digest": "digest", "format": "fmt"} and "source_models" not in block
    graph.summary_fields = {"basis": 1}
    assert graph.report_block()["source_models"] == ["m", "m2"]
    assert len(graph.digest) == 64


def test_the_digest_changes_with_any_node_field():
    base = _graph([_node("a"), _node("b", 5.0, deps=[("a", 1.0)])]).digest
    assert _graph([_node("a"), _node("b", 5.0, deps=[("a", 1.0)])]).digest == base
    assert _graph([_node("a"), _node("b", 6.0, deps=[("a", 1.0)])]).digest != base
    assert _graph([_node("a"), _node("b", 5.0, deps=[("a", 2.0)])]).digest != base
