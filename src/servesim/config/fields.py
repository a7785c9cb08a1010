"""The value types and rule plumbing every section of the schema uses.

Counts and sizes are *strict* integers (YAML ``"5"``, ``5.0`` and ``true`` are rejected); most
real-valued knobs are strict finite numbers (an integer is accepted, a string or bool is not).
Cross-field rules raise `RuleViolation`, which carries key paths relative to the model that
checks them.
"""


from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Self

from annotated_types import Ge, Gt, Le
from pydantic import AllowInfNan, BaseModel, ConfigDict, Strict
from pydantic.functional_validators import AfterValidator, PlainValidator

from servesim.limits import MAX_MS, MAX_REQUESTS, MAX_TOKENS, MAX_WORKERS

PositiveInt = Annotated[int, Strict(), Gt(0)]
"""Strict integer > 0 (rejects strings, floats and bools)."""
NonNegativeInt = Annotated[int, Strict(), Ge(0)]
"""Strict integer >= 0."""
PositiveNumber = Annotated[float, Strict(), AllowInfNan(False), Gt(0)]
"""Strict finite number > 0 (integers accepted, strings and bools rejected)."""
NonNegativeNumber = Annotated[float, Strict(), AllowInfNan(False), Ge(0)]
"""Strict finite number >= 0."""
Fraction = Annotated[float, Strict(), AllowInfNan(False), Ge(0), Le(1)]
"""Strict finite number in [0, 1]."""
OpenFraction = Annotated[float, Strict(), AllowInfNan(False), Gt(0), Le(1)]
"""Strict finite number in (0, 1]."""

LaxDurationMs = Annotated[float, AllowInfNan(False), Ge(0), Le(MAX_MS)]
"""Finite milliseconds in [0, MAX_MS], in pydantic's lax mode (numeric strings and bools
accepted, like the reference)."""
LaxDurationSeconds = Annotated[float, AllowInfNan(False), Ge(0), Le(MAX_MS / 1000)]
"""Finite seconds in [0, MAX_MS / 1000], lax like `LaxDurationMs`."""
DurationMs = Annotated[float, Strict(), AllowInfNan(False), Ge(0), Le(MAX_MS)]
"""Strict finite milliseconds in [0, MAX_MS]."""
PositiveSeconds = Annotated[float, Strict(), AllowInfNan(False), Gt(0), Le(MAX_MS / 1000)]
"""Strict finite seconds in (0, MAX_MS / 1000]."""
def _one_per_max_ms(rate: float) -> float:
    if rate < 1000 / MAX_MS:
        raise ValueError(f"must be >= {1000 / MAX_MS:g} (one arrival per {MAX_MS:g} ms at least; got {show(rate)})")
    return rate


Rate = Annotated[float, Strict(), AllowInfNan(False), Gt(0), AfterValidator(_one_per_max_ms)]
"""Strict finite events per second, at least one per MAX_MS."""
WorkerCount = Annotated[int, Strict(), Gt(0), Le(MAX_WORKERS)]
"""Strict integer in [1, MAX_WORKERS]."""
RequestCount = Annotated[int, Strict(), Gt(0), Le(MAX_REQUESTS)]
"""Strict integer in [1, MAX_REQUESTS]."""
TokenCount = Annotated[int, Strict(), Gt(0), Le(MAX_TOKENS)]
"""Strict integer in [1, MAX_TOKENS]."""

U64_MAX = 2**64 - 1
ByteCount = Annotated[int, Strict(), Gt(0), Le(U64_MAX)]
"""Strict positive integer that fits an unsigned 64-bit integer."""


def _positive_int_or(word: str) -> Callable[[Any], int | str]:
    """Validator accepting a strict positive integer or exactly the string `word`."""

    def validate(value: Any) -> int | str:
        if value == word and isinstance(value, str):
            return word
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ValueError(f"must be a positive integer or '{word}' (got {show(value)})")

    return validate


def _non_empty_string(value: str) -> str:
    """Reject the empty string (whitespace-only strings are accepted, like the reference)."""
    if value == "":
        raise ValueError("must be a non-empty string")
    return value


def _string(value: Any) -> str:
    """Require a string (no number coercion)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string (got {show(value)})")
    return value


MAX_MODEL_NAME = 1024
"""Longest `engine.model` accepted (a Hugging Face id is at most 96 characters; a path, rarely
longer than a few hundred)."""


def _model_name(value: Any) -> str:
    """A non-empty model id or directory of at most `MAX_MODEL_NAME` characters."""
    name = _non_empty_string(_string(value))
    if len(name) > MAX_MODEL_NAME:
        raise ValueError(f"must be at most {MAX_MODEL_NAME} characters (got {len(name):,}: {name[:40]!r}...)")
    return name


def _hardware(value: Any) -> str:
    """A non-empty system name other than 'auto'."""
    name = _non_empty_string(_string(value))
    if name == "auto":
        raise ValueError("'auto' is recommendation-only; name a system such as h200_sxm")
    return name


ModelName = Annotated[str, PlainValidator(_model_name)]
"""Non-empty string."""
HardwareName = Annotated[str, PlainValidator(_hardware)]
"""Non-empty string other than 'auto'."""
ContextLength = Annotated[int | Literal["max"], PlainValidator(_positive_int_or("max"))]
"""Strict positive integer or 'max'."""
BytesPerToken = Annotated[int | Literal["auto"], PlainValidator(_positive_int_or("auto"))]
"""Strict positive integer or 'auto'."""


def show(value: Any) -> str:
    """Render a user value the way it was probably written in YAML (null, true, 'text', 5)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------------
# Rule plumbing
# --------------------------------------------------------------------------------------------


class RuleViolation(ValueError):
    """Cross-field rules broken inside one model.

    ``problems`` is a list of ``(relative_path, rule)``; the relative path is dotted and
    relative to the model whose validator raised (``""`` = the model itself).
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {rule}" if path else rule for path, rule in problems))
        self.problems = problems


def raise_if(problems: list[tuple[str, str]]) -> None:
    """Raise a RuleViolation when any problem was collected."""
    if problems:
        raise RuleViolation(problems)


def without_nulls(data: Any, keys: tuple[str, ...]) -> Any:
    """Drop `keys` whose value is null: for these keys null means "not given"."""
    if not isinstance(data, Mapping):
        return data
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


def type_tag(default: str | None) -> Callable[[Any], str | None]:
    """Discriminator callable: the `type` key (or attribute), `default` when it is absent."""

    def tag(value: Any) -> str | None:
        found = value.get("type", default) if isinstance(value, Mapping) else getattr(value, "type", default)
        return found if isinstance(found, str) else None

    return tag


class SchemaModel(BaseModel):
    """Base of every schema object: immutable, unknown keys rejected, docstrings as help.

    Start-up cost: each model's validator is built only when first needed (`defer_build`; a
    config validates through `SimConfig`'s alone), and the schema modules do not use ``from
    __future__ import annotations``, so pydantic does not compile every field's annotation
    string again (a method returning its own class names it in quotes)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    @classmethod
    def defaults(cls) -> Self:
        """The model with every field at its default, made without validation: what ``cls()``
        gives (a default passes every rule), without building the model's validator at import
        time (a field's default object; the config validates through `SimConfig`'s alone)."""
        return cls.model_construct()
