"""Domains: the values a recommend knob may take — a value, ``{choices: [...]}`` or
``{range: {min, max, step, scale}}`` — and their pydantic validators."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from annotated_types import Gt
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from servesim.limits import MAX_DOMAIN_VALUES

PositiveNumber = Annotated[float, Strict(), AllowInfNan(False), Gt(0)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Choices(_Model):
    """A finite set of values to choose from."""

    choices: list[Any]

    @field_validator("choices")
    @classmethod
    def _non_empty_unique(cls, values: list[Any]) -> list[Any]:
        if not values:
            raise ValueError("choices must be a non-empty list")
        if len({repr(v) for v in values}) != len(values):
            raise ValueError("choices must not repeat a value")
        return values


class RangeSpec(_Model):
    """Bounds of a numeric range; `step` makes it a finite grid, `scale: log` samples log-uniformly."""

    min: Annotated[float, Strict(), AllowInfNan(False)]
    max: Annotated[float, Strict(), AllowInfNan(False)]
    step: PositiveNumber | None = None
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _bounds(self) -> RangeSpec:
        if self.min > self.max:
            raise ValueError("range requires min <= max")
        if self.scale == "log" and (self.min <= 0 or self.step is not None):
            raise ValueError("a log range needs min > 0 and takes no step")
        return self


class Range(_Model):
    range: RangeSpec


def domain_parser(kind: type, check: Any) -> Any:
    """Validate a domain of `kind` values (int or float) and each value with `check`."""

    def validate(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"choices"}:
                choices = Choices.model_validate(value)
                for item in choices.choices:
                    check(item)
                return choices
            if set(value) == {"range"}:
                domain = Range.model_validate(value)
                spec = domain.range
                if kind is int:
                    if spec.min != int(spec.min) or spec.max != int(spec.max) or (
                            spec.step is not None and spec.step != int(spec.step)):
                        raise ValueError("an integer range needs integer min, max and step")
                    if spec.scale == "linear" and spec.step is None:
                        raise ValueError("an integer linear range requires step")
                check(int(spec.min) if kind is int else spec.min)
                check(int(spec.max) if kind is int else spec.max)
                _check_size(spec, integer=kind is int)
                return domain
            raise ValueError("a domain is a value, {choices: [...]} or {range: {min, max, step, scale}}")
        check(value)
        return value

    return validate


def range_size(spec: RangeSpec, *, integer: bool) -> int | None:
    """Values a range holds, counted without listing them (None: a continuous range)."""
    if spec.step is not None:
        return int(math.floor((spec.max - spec.min) / spec.step + 1e-9)) + 1
    if integer:
        return int(spec.max) - int(spec.min) + 1
    return None


def _check_size(spec: RangeSpec, *, integer: bool) -> None:
    size = range_size(spec, integer=integer)
    if size is not None and size > MAX_DOMAIN_VALUES:
        hint = "a larger step or a narrower min..max" if integer else "a larger step, or no step (continuous)"
        raise ValueError(f"a range may hold at most {MAX_DOMAIN_VALUES:,} values (got {size:,}: use {hint})")


def check_positive_int(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"must be a positive integer (got {value!r})")


def check_positive_number(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive finite number (got {value!r})")


def check_non_negative_number(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number >= 0 (got {value!r})")


def check_fraction(value: Any) -> None:
    check_positive_number(value)
    if value > 1:
        raise ValueError(f"must be in (0, 1] (got {value!r})")


IntDomain = Annotated[Any, Field(json_schema_extra={"domain": "int"})]
FloatDomain = Annotated[Any, Field(json_schema_extra={"domain": "float"})]


def domain_validator(*fields: str, kind: type, check: Any) -> Any:
    validate = domain_parser(kind, check)

    def run(cls: Any, value: Any) -> Any:
        return None if value is None else validate(value)

    return field_validator(*fields)(classmethod(run))
