"""The configuration reference (docs/config.md), generated from the schema's field docstrings.

    python -m servesim.config.reference > docs/config.md
"""

from __future__ import annotations

import ast
import inspect
import types
import typing
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from servesim.config.schema import SimConfig

HEADER = """# Configuration reference

servesim reads the reference's (AISimulate) `predict` YAML unchanged. Three top-level sections:
`engine` (required), `traffic` and `evaluation`. Unknown keys are errors that name the key;
counts are strict integers (`"5"`, `5.0` and `true` are rejected). Relative trace paths (and a
relative model directory) are resolved against the config file's folder. Any value can be
overridden on the command line with `--set dotted.path=YAML_VALUE`.

This page is generated from the schema (`python -m servesim.config.reference`); cross-field
rules are listed at the end.
"""

RULES = """## Cross-field rules

* `engine.mode: aggregated` needs `workers.aggregated` and no `prefill`/`decode`;
  `disaggregated` needs both `prefill` and `decode` and no `aggregated`.
* `backend: trtllm` cannot run disaggregated; `kv_transfer` is only for disaggregated mode.
* vLLM and TRT-LLM need `kv_cache.block_size` ≥ 2.
* `kv_cache.state_cache` (upstream 0.13): backend `vllm`, aggregated mode (servesim), no
  `speculative`; a fixed capacity, explicit `block_size` ≥ 2 and `bytes_per_token`, and a pool of
  at least one token block plus one state (`ceil(bytes_per_request / (block_size × bytes_per_token))`).
* `capacity: {type: fixed}` needs `blocks` and forbids `memory_fraction`; `type: default` forbids `blocks`.
* `timing: {type: fixed}` needs `prefill_ms` and `decode_ms`; `default`, `polynomial` and
  `roofline` forbid them.
* A load type accepts only its own keys. `poisson` and `constant_rate` need the rate matching the
  source: `requests_per_second` for `synthetic`, `sessions_per_second` for `synthetic-session`.
* Trace sources: load `trace_timestamps` or `concurrency`; the only stop is
  `max_virtual_time_seconds`; exactly one path (except `format: dynamo`). `mooncake-delta` and
  `agentic_mooncake` need aggregated mode; `agentic_mooncake` needs `trace_timestamps` and no
  time cap; `applied_compute_agentic` needs `concurrency`.
* Synthetic sources: a stop with exactly one count — `requests`/`requests_per_load_unit` for
  `synthetic`, `sessions`/`sessions_per_load_unit` for `synthetic-session`; relative counts are
  `max(1, round(ratio × load unit))` (load unit = concurrency or rate); no `trace_timestamps`
  load and no time cap.
* `evaluation.sla` in the reference's form (numbers only): `ttft_ms` and `itl_ms` together, or
  `e2e_ms` alone. With a percentile target (servesim extension) any combination is accepted.
* Omitted `traffic` means synthetic 1024 → 128 tokens, concurrency 10, 100 requests.
"""


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        parts = list(dict.fromkeys(_type_name(a) for a in typing.get_args(annotation) if a is not type(None)))
        return " \\| ".join(parts)
    if origin is list:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: Any) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default if field.default_factory is None else field.default_factory()
    if isinstance(value, BaseModel):
        return "see below"
    return "—" if value is None else f"`{value}`"


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field can hold (union members included)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


@cache
def _attribute_docs(model: type) -> dict[str, str]:
    """The docstrings written under a class's attributes (read from its source; pydantic's own
    `use_attribute_docstrings` would parse every model at import time, on every run)."""
    tree = ast.parse(inspect.getsource(model))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_doc(model: type[BaseModel], name: str) -> str:
    """A field's docstring, from the class that declares it."""
    for klass in model.__mro__:
        doc = _attribute_docs(klass).get(name) if klass.__module__ == model.__module__ else None
        if doc is not None:
            return doc
    return ""


def _sections(model: type[BaseModel], path: str, out: list[str], seen: set[type]) -> None:
    if model in seen:
        return
    seen.add(model)
    title = f"`{path}`" if path else "Top level"
    tag = model.model_fields.get("type")
    if tag is not None and typing.get_origin(tag.annotation) is typing.Literal:
        title += f" with `type: {typing.get_args(tag.annotation)[0]}`"
    doc = (model.__doc__ or "").strip().splitlines()[0]
    out += [f"## {title}", "", doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        out.append(f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {field_doc(model, name)} |")
        key = f"{path}.{name}" if path else name
        if path == "engine.workers":
            key = "engine.workers.<role>"
        nested += [(key, m) for m in _models(field.annotation)]
    out.append("")
    for sub_path, sub in nested:
        _sections(sub, sub_path, out, seen)


def render() -> str:
    """The whole reference as Markdown."""
    out = [HEADER]
    _sections(SimConfig, "", out, set())
    out.append(RULES)
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
