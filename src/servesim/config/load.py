"""Reading a `predict` configuration: YAML file -> ``--set`` overrides -> validated SimConfig.

Every problem becomes a :class:`~servesim.errors.ConfigError` whose message has one line per
problem, ``dotted.key.path: rule``, prefixed by the file when there is one.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from servesim.config.schema import (
    DISCRIMINATED_FIELDS,
    NOT_IN_SCHEMA,
    SECTIONS,
    RuleViolation,
    SimConfig,
    TraceSource,
    show,
)
from servesim.config.strict_yaml import YamlRefused, load_yaml
from servesim.errors import ConfigError

__all__ = ["STACKS", "apply_overrides", "describe_validation_error", "load_config", "parse_config", "read_mapping"]

MAX_CONFIG_CHARS = 16 << 20
"""Largest configuration file read (a config is a few kilobytes)."""

STACKS = ("dynamo", "engine")
"""The reference's execution stacks (``--stack``): ``engine`` has no router or planner."""
DYNAMO_SECTIONS = ("router", "planner")


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = (), *,
                stack: str | None = None, allow_duplicate_keys: bool = False) -> SimConfig:
    """Read the YAML file at `path`, apply ``--set PATH=VALUE`` overrides in order, validate.

    Relative trace paths and a relative ``engine.model`` directory are read as the reference
    reads them, from the current directory — or, when only the file's folder has them, from
    there (with a note on stderr). `stack` is ``--stack`` (None: every section is accepted). A
    mapping that repeats a key is an error unless `allow_duplicate_keys` lets the last value
    win (the reference's behaviour).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"the configuration must be given as a file path (got {type(path).__name__})")
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError("overrides must be a list of 'PATH=YAML_VALUE' strings")
    source = os.fspath(path)
    if not isinstance(source, str):
        raise ConfigError(f"the configuration path must be text (got {type(source).__name__})")
    data = read_mapping(source, allow_duplicate_keys)
    try:
        data = apply_overrides(data, overrides, allow_duplicate_keys=allow_duplicate_keys)
        return parse_config(data, base_dir=Path(os.path.abspath(source)).parent, stack=stack)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def parse_config(data: Mapping[str, Any], base_dir: Path | None = None, *, stack: str | None = None) -> SimConfig:
    """Validate an in-memory configuration document (the parsed YAML mapping).

    With `base_dir` (the config's folder), relative trace paths and model directories missing
    from the current directory are looked up there too; without it they are kept as written.
    With ``stack="engine"`` the Dynamo sections (router, planner) are refused, as the reference
    refuses them on its engine stack.
    """
    _check_top_level_keys(data)
    sections = tuple(k for k in SECTIONS if stack != "engine" or k not in DYNAMO_SECTIONS)
    problems: list[str] = []
    config = None
    try:
        config = SimConfig.model_validate({k: v for k, v in data.items() if k in sections})
    except ValidationError as exc:
        problems += describe_validation_error(exc)
    problems += _adapter_section_problems(data, sections, stack or "engine")
    if problems or config is None:
        raise ConfigError(_format_problems(problems))
    config = _resolve_relative_paths(config, base_dir) if base_dir is not None else config
    return _with_calibration_settings(config)


def _with_calibration_settings(config: SimConfig) -> SimConfig:
    """A calibration file's fit settings filled into its role (`servesim.config.calibration`)."""
    if not any(getattr(w.timing, "calibration", None) for w in config.engine.roles.values()):
        return config
    from servesim.config.calibration import apply_calibration_settings

    return apply_calibration_settings(config)


# --------------------------------------------------------------------------------------------
# File and overrides
# --------------------------------------------------------------------------------------------


def read_mapping(source: str, allow_duplicate_keys: bool = False) -> dict[str, Any]:
    """Parse the file as one YAML document that is a mapping (strictly: `strict_yaml`); errors
    start with the file's name."""
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read(MAX_CONFIG_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{source}: could not read configuration: {reason}") from None
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(f"{source}: could not read configuration: larger than {MAX_CONFIG_CHARS >> 20} MiB")
    try:
        data = load_yaml(text, allow_duplicate_keys=allow_duplicate_keys)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: malformed YAML: {exc}") from None
    except YamlRefused as exc:
        where = f"{source}:{exc.line}" if exc.line is not None else source
        raise ConfigError(f"{where}: {exc}") from None
    if not isinstance(data, dict):
        found = "an empty document" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{source}: the configuration must be one YAML mapping (found {found})")
    return data


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str], *,
                    refused: Sequence[str] = NOT_IN_SCHEMA, allow_duplicate_keys: bool = False) -> dict[str, Any]:
    """Return a copy of `data` with each ``PATH=YAML_VALUE`` override applied in order.

    PATH is dot-separated mapping keys; missing intermediate mappings are created; the value
    is parsed as YAML. Rejected: no '=', an empty or purely numeric key, a path that crosses
    a non-mapping value, and a first key in `refused` (for predict: optimization/optimizer).
    """
    result = copy.deepcopy(dict(data))
    for override in overrides:
        keys, value = _parse_override(override, refused, allow_duplicate_keys)
        _set_path(result, keys, value, override)
    return result


def _parse_override(override: str, refused: Sequence[str], allow_duplicate_keys: bool) -> tuple[list[str], Any]:
    """Split ``PATH=VALUE`` into its keys and parsed YAML value."""
    path, sep, text = override.partition("=")
    if not sep:
        raise ConfigError(f"invalid --set {override!r}: expected PATH=YAML_VALUE")
    keys = path.split(".")
    if any(key == "" for key in keys):
        raise ConfigError(f"invalid --set path {path!r}: empty key (paths are dot-separated mapping keys)")
    if any(key.isdigit() for key in keys):
        raise ConfigError(f"invalid --set path {path!r}: sequence indexes are unsupported")
    if keys[0] in refused:
        raise ConfigError(f"--set path {path!r}: '{keys[0]}' is not in the schema of predict")
    try:
        value = load_yaml(text, allow_duplicate_keys=allow_duplicate_keys)
    except (yaml.YAMLError, YamlRefused) as exc:
        raise ConfigError(f"invalid YAML value for --set {path!r}: {exc}") from None
    return keys, value


def _set_path(data: dict[str, Any], keys: list[str], value: Any, override: str) -> None:
    """Assign `value` at `keys`, creating missing mappings on the way."""
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            crossed = ".".join(keys[: depth + 1])
            raise ConfigError(f"--set {override!r}: path crosses the non-mapping value at {crossed!r}")
        node = child
    node[keys[-1]] = value


# --------------------------------------------------------------------------------------------
# Top-level sections
# --------------------------------------------------------------------------------------------


def _check_top_level_keys(data: Mapping[Any, Any]) -> None:
    """Top-level keys are section names; sections of other commands are refused at once."""
    for key in data:
        if not isinstance(key, str) or key == "" or "." in key:
            raise ConfigError(f"top-level key {show(key)}: must be a non-empty section name without dots")
    refused = [key for key in data if key in NOT_IN_SCHEMA]
    if refused:
        raise ConfigError("\n".join(f"{key}: not in the schema of predict" for key in refused))


def _adapter_section_problems(data: Mapping[str, Any], sections: tuple[str, ...], stack: str) -> list[str]:
    """Keys that are not schema sections would be adapter sections of the stack; it has none."""
    problems = []
    for key, value in data.items():
        if key in sections:
            continue
        if not isinstance(value, Mapping):
            problems.append(f"{key}: adapter section must be a mapping (got {show(value)})")
        else:
            hint = " (the router and planner sections need --stack dynamo)" if key in DYNAMO_SECTIONS else ""
            problems.append(f"{key}: config adapter '{stack}.{key}' is unavailable; installed adapters: <none>{hint}")
    return problems


# --------------------------------------------------------------------------------------------
# Relative paths
# --------------------------------------------------------------------------------------------


_NOTED: set[str] = set()


def _locate(path: str, base_dir: Path, key: str, exists: Any) -> str:
    """`path` as the reference reads it (from the current directory), or the one beside the
    config when only that exists — said once per path on stderr."""
    def found(candidate: Path) -> bool:
        try:
            return bool(exists(candidate))
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte
            return False

    if os.path.isabs(path) or found(Path(path)) or not found(base_dir / path):
        return path
    beside = str(base_dir / path)
    if beside not in _NOTED:
        _NOTED.add(beside)
        import logging  # imported only to say something: a run starts without it

        logging.getLogger("servesim").warning(
            "servesim: note: %s %r is not in the current directory; using the one beside the config, %s",
            key, path, beside)
    return beside


def _resolve_relative_paths(config: SimConfig, base_dir: Path) -> SimConfig:
    """Trace paths and a model directory: the current directory's, else the config folder's
    (`_locate`); the AIC systems directory (servesim's key): relative to the config's folder."""
    source = config.traffic.source
    if isinstance(source, TraceSource):
        paths = [_locate(p, base_dir, "traffic.source.paths", Path.exists) for p in source.paths]
        traffic = config.traffic.model_copy(update={"source": source.model_copy(update={"paths": paths})})
        config = config.model_copy(update={"traffic": traffic})
    model = _locate(config.engine.model, base_dir, "engine.model", Path.is_dir)
    if model != config.engine.model:
        engine = config.engine.model_copy(update={"model": model})
        config = config.model_copy(update={"engine": engine})
    systems = config.engine.aic_systems_path
    if systems is not None and not os.path.isabs(systems):
        engine = config.engine.model_copy(update={"aic_systems_path": str(base_dir / systems)})
        config = config.model_copy(update={"engine": engine})
    return _resolve_calibration_paths(config, base_dir)


def _resolve_calibration_paths(config: SimConfig, base_dir: Path) -> SimConfig:
    """Make every role's `timing.calibration` file absolute (relative to the config's folder)."""
    workers = config.engine.workers
    updates: dict[str, Any] = {}
    for role, worker in config.engine.roles.items():
        path = getattr(worker.timing, "calibration", None)
        if path is not None and not os.path.isabs(path):
            timing = worker.timing.model_copy(update={"calibration": str(base_dir / path)})
            updates[role] = worker.model_copy(update={"timing": timing})
    if not updates:
        return config
    engine = config.engine.model_copy(update={"workers": workers.model_copy(update=updates)})
    return config.model_copy(update={"engine": engine})


# --------------------------------------------------------------------------------------------
# Validation errors -> "path: rule" lines
# --------------------------------------------------------------------------------------------

_RULES: dict[str, str] = {
    "missing": "is required",
    "extra_forbidden": "unknown key",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}

_BOUNDS: dict[str, str] = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
_BOUND_KEYS: dict[str, str] = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}


def describe_validation_error(exc: ValidationError) -> list[str]:
    """One ``dotted.key.path: rule`` line per problem, without pydantic internals."""
    lines: list[str] = []
    for error in exc.errors():
        for path, rule in _describe(error):
            line = f"{path}: {rule}" if path else rule
            if line not in lines:
                lines.append(line)
    return lines


def _describe(error: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Turn one pydantic error into (path, rule) pairs."""
    loc = _tidy_location(tuple(error["loc"]))
    kind: str = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind == "value_error" and isinstance(ctx.get("error"), RuleViolation):
        return [(_join(loc, rel), rule) for rel, rule in ctx["error"].problems]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return [_describe_tag(loc, value)]
    return [(_join(loc), _rule(kind, ctx, value, error["msg"]))]


def _rule(kind: str, ctx: Mapping[str, Any], value: Any, message: str) -> str:
    """The rule broken, in plain words, with the offending value."""
    got = f" (got {show(value)})"
    if kind in _RULES:
        return _RULES[kind] + ("" if kind in ("missing", "extra_forbidden") else got)
    if kind in _BOUNDS:
        return f"must be {_BOUNDS[kind]} {_number(ctx[_BOUND_KEYS[kind]])}{got}"
    if kind == "literal_error":
        return f"must be {ctx['expected']}{got}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return message.removeprefix("Value error, ")


def _number(bound: Any) -> Any:
    """Show a float bound without a useless '.0' (0.0 -> 0)."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def _describe_tag(loc: tuple[str | int, ...], value: Any) -> tuple[str, str]:
    """A discriminated union whose `type` is missing or unknown."""
    if not isinstance(value, Mapping):
        return _join(loc), f"must be a mapping (got {show(value)})"
    field = loc[-1] if loc else ""
    tags = ", ".join(f"'{t}'" for t in DISCRIMINATED_FIELDS.get(str(field), ()))
    if "type" not in value:
        return _join(loc, "type"), f"is required (one of {tags})"
    return _join(loc, "type"), f"must be one of {tags} (got {show(value['type'])})"


def _tidy_location(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop the union tags pydantic inserts after a discriminated field (capacity.fixed.blocks -> capacity.blocks)."""
    kept: list[str | int] = []
    for i, part in enumerate(loc):
        parent = loc[i - 1] if i else None
        if isinstance(parent, str) and part in DISCRIMINATED_FIELDS.get(parent, ()) and kept and kept[-1] == parent:
            continue
        kept.append(part)
    return tuple(kept)


def _join(loc: tuple[str | int, ...], relative: str = "") -> str:
    """Dotted path; list indexes render as [i]."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    if relative:
        text = f"{text}.{relative}" if text else relative
    return text


def _format_problems(problems: list[str]) -> str:
    """One problem on one line; several under a count."""
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} configuration problems:\n" + "\n".join(f"  {p}" for p in problems)
