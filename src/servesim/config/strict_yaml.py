"""YAML for configuration files and ``--set`` values: PyYAML's safe loader, made strict.

On top of safe loading (no Python objects), a document is refused when

* a mapping repeats a key (YAML's merge key ``<<`` may still be overridden explicitly) — unless
  asked to let the last value win, as the reference does;
* it nests deeper than MAX_DEPTH levels, or aliases make it deeper once expanded;
* its aliases expand to more than MAX_NODES values (a few hundred bytes of "alias bomb" can
  stand for billions of values), or an alias refers to the node that contains it.

The checks run on the parsed node graph, before any Python object is built.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_DEPTH = 100
"""Deepest nesting accepted (a servesim config nests about 6 levels)."""
MAX_NODES = 100_000
"""Most values a document may hold once its aliases are expanded."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlRefused(ValueError):
    """A well-formed YAML document that servesim refuses; `line` is 1-based (None: whole document)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that limits composition depth and refuses duplicate keys."""

    def __init__(self, stream: str, allow_duplicate_keys: bool) -> None:
        super().__init__(stream)
        self._depth = 0
        self._allow_duplicate_keys = allow_duplicate_keys

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value if not self._allow_duplicate_keys else ():
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise YamlRefused(f"duplicate key {key!r} (first on line {seen[key]})", line)
                seen[key] = line
            except TypeError:  # an unhashable key: the safe constructor reports it
                continue
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: _StrictLoader, node: Node) -> Any:
    """An integer scalar; one of more digits than Python converts is refused with its line."""
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)  # type: ignore[arg-type]
    except ValueError:
        raise YamlRefused(f"an integer of {len(str(node.value)):,} characters: too long to convert",
                          node.start_mark.line + 1) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_yaml(text: str, *, allow_duplicate_keys: bool = False) -> Any:
    """Parse one YAML document strictly (see the module docstring)."""
    loader = _StrictLoader(text, allow_duplicate_keys)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def _check_expansion(root: Node) -> None:
    """Count the values (and the depth) the node graph stands for once aliases are expanded,
    without expanding it: shared nodes are counted once per use from a memo."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth)
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and not children_done:
            continue
        children = _children(node)
        if not children_done:
            if key in on_path:
                raise YamlRefused("an alias refers to a node that contains it", node.start_mark.line + 1)
            on_path.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) in on_path:
                    raise YamlRefused("an alias refers to a node that contains it", child.start_mark.line + 1)
                if id(child) not in sizes:
                    stack.append((child, False))
            continue
        on_path.discard(key)
        values = 1 + sum(sizes[id(child)][0] for child in children)
        depth = 1 + max((sizes[id(child)][1] for child in children), default=0)
        if values > MAX_NODES:
            raise YamlRefused(f"aliases expand the document to more than {MAX_NODES:,} values")
        if depth > MAX_DEPTH:
            raise YamlRefused(f"aliases nest the document deeper than {MAX_DEPTH} levels")
        sizes[key] = (values, depth)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []
