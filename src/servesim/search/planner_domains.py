"""The `planner:` section of a recommend config, as upstream AISimulate 0.13 reads it.

`policy` is `enabled`, `disabled` or `{choices: [...]}` (omitted: both). The planner's knobs come
in four groups, each searched as one categorical knob whose values are *presets*:

    scaling_policy     enable_throughput_scaling, enable_load_scaling,
                       throughput_adjustment_interval_seconds, load_adjustment_interval_seconds
    fpm_sampling       max_num_fpm_samples, fpm_sample_bucket_size
    load_sensitivity   load_scaling_down_sensitivity, load_min_observations
    load_predictor     load_predictor (the family, spelt `type:` in the group), load_predictor_log1p,
                       prophet_window_size, kalman_q_level, kalman_q_trend, kalman_r, kalman_min_points

A group is omitted or `{preset: default}` (every named preset of the group), `{preset: [name or
complete mapping, ...]}`, or `{preset: false}` — then the group's flat keys (`planner.<key>`) are
domains, an omitted one over upstream's default values, and every combination is one preset. A
flat key is refused unless its group is `preset: false`.

A candidate carries only the knobs its scaling policy uses: `planner.policy: disabled` (or a
scaling policy that scales nothing) carries none; fpm_sampling and load_predictor only with
throughput scaling; load_sensitivity only with load scaling. Scaling policies with throughput
scaling need a goodput target and an SLA with ttft_ms and itl_ms: the default list drops them
otherwise, a list that names them is refused.

Presets are labelled by name; a mapping gets the name of the preset it equals, else a label built
from its values (`throughput_300_5`, `48/9`, `75/4`, `kalman_q2_0.2_r5_n4_raw`), so equal
configurations share a label.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servesim.search.domains import Choices, Range, domain_parser

GROUPS = ("scaling_policy", "fpm_sampling", "load_sensitivity", "load_predictor")
POLICIES = ("disabled", "enabled")
PREDICTOR_FAMILIES = ("constant", "arima", "prophet", "kalman")

GROUP_KEYS: dict[str, tuple[str, ...]] = {
    "scaling_policy": ("enable_throughput_scaling", "enable_load_scaling",
                       "throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds"),
    "fpm_sampling": ("max_num_fpm_samples", "fpm_sample_bucket_size"),
    "load_sensitivity": ("load_scaling_down_sensitivity", "load_min_observations"),
    "load_predictor": ("load_predictor", "load_predictor_log1p", "prophet_window_size", "kalman_q_level",
                       "kalman_q_trend", "kalman_r", "kalman_min_points"),
}
"""The planner keys each preset group sets (upstream AISimulate 0.13's grouping)."""

INDEPENDENT_DEFAULTS: dict[str, tuple[tuple[Any, ...], ...]] = {
    "scaling_policy": ((False, True), (False, True), (180, 600), (5, 10)),
    "fpm_sampling": ((32, 64, 128), (4, 16, 64)),
    "load_sensitivity": ((70, 80, 90), (3, 5, 8)),
    "load_predictor": (PREDICTOR_FAMILIES, (False, True), (20, 50), (1.0, 10.0), (0.1, 1.0), (5.0, 10.0), (3, 5)),
}
"""With `preset: false`, the values upstream searches for a flat key the config leaves out."""


def _scaling(throughput: bool, load: bool, t_interval: int | None, l_interval: int | None) -> dict[str, Any]:
    return dict(zip(GROUP_KEYS["scaling_policy"], (throughput, load, t_interval, l_interval), strict=True))


def _predictor(family: str, log1p: bool, window: int = 50, q_level: float = 1.0, q_trend: float = 0.1,
               r: float = 10.0, min_points: int = 5) -> dict[str, Any]:
    return dict(zip(GROUP_KEYS["load_predictor"], (family, log1p, window, q_level, q_trend, r, min_points),
                    strict=True))


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "scaling_policy": {
        "disabled": _scaling(False, False, None, None),
        "throughput_180_5": _scaling(True, False, 180, 5),
        "throughput_600_5": _scaling(True, False, 600, 5),
        "load_180_5": _scaling(False, True, 180, 5),
        "load_180_10": _scaling(False, True, 180, 10),
        "hybrid_180_5": _scaling(True, True, 180, 5),
        "hybrid_600_5": _scaling(True, True, 600, 5),
    },
    "fpm_sampling": {
        "small": {"max_num_fpm_samples": 32, "fpm_sample_bucket_size": 4},
        "default": {"max_num_fpm_samples": 64, "fpm_sample_bucket_size": 16},
        "large": {"max_num_fpm_samples": 128, "fpm_sample_bucket_size": 16},
        "fine": {"max_num_fpm_samples": 128, "fpm_sample_bucket_size": 64},
    },
    "load_sensitivity": {
        "aggressive": {"load_scaling_down_sensitivity": 70, "load_min_observations": 3},
        "default": {"load_scaling_down_sensitivity": 80, "load_min_observations": 5},
        "conservative": {"load_scaling_down_sensitivity": 90, "load_min_observations": 8},
    },
    "load_predictor": {
        "constant_last": _predictor("constant", False),
        "arima_raw": _predictor("arima", False),
        "arima_log1p": _predictor("arima", True),
        "prophet_w20_raw": _predictor("prophet", False, 20),
        "prophet_w20_log1p": _predictor("prophet", True, 20),
        "prophet_w50_raw": _predictor("prophet", False),
        "prophet_w50_log1p": _predictor("prophet", True),
        "kalman_default_raw": _predictor("kalman", False),
        "kalman_default_log1p": _predictor("kalman", True),
        "kalman_reactive_raw": _predictor("kalman", False, 50, 10.0, 1.0, 5.0, 3),
        "kalman_reactive_log1p": _predictor("kalman", True, 50, 10.0, 1.0, 5.0, 3),
    },
}
"""Upstream AISimulate 0.13's named planner presets (observed by running it; values equal to
servesim's planner defaults where upstream takes the planner's default)."""


def scales(label: str) -> tuple[bool, bool]:
    """(throughput scaling, load scaling) of a scaling_policy label (labels name their kind)."""
    kind = label.split("_", 1)[0]
    return kind in ("throughput", "hybrid"), kind in ("load", "hybrid")


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _relevant(group: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that matter: a predictor's parameters of its own family only."""
    if group != "load_predictor":
        return fields
    family = fields["load_predictor"]
    keep = {"load_predictor", "load_predictor_log1p"}
    keep |= {"prophet_window_size"} if family == "prophet" else set()
    keep |= {"kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points"} if family in ("arima", "kalman") \
        else set()
    return {k: v for k, v in fields.items() if k in keep}


def _label(group: str, fields: dict[str, Any]) -> str:
    for name, preset in PRESETS[group].items():
        if _relevant(group, preset) == _relevant(group, fields):
            return name
    if group == "scaling_policy":
        throughput, load, t_interval, l_interval = (fields[k] for k in GROUP_KEYS[group])
        if not (throughput or load):
            return "disabled"
        kind = "hybrid" if throughput and load else "throughput" if throughput else "load"
        return f"{kind}_{_fmt(t_interval)}_{_fmt(l_interval)}"
    if group == "load_predictor":
        f = fields
        tail = "log1p" if f["load_predictor_log1p"] else "raw"
        if f["load_predictor"] == "prophet":
            return f"prophet_w{f['prophet_window_size']}_{tail}"
        if f["load_predictor"] == "constant":
            return f"constant_last_{tail}" if tail == "log1p" else "constant_last"
        return (f"{f['load_predictor']}_q{_fmt(f['kalman_q_level'])}_{_fmt(f['kalman_q_trend'])}"
                f"_r{_fmt(f['kalman_r'])}_n{f['kalman_min_points']}_{tail}")
    return "/".join(_fmt(fields[k]) for k in GROUP_KEYS[group])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _check_field(group: str, key: str, value: Any) -> None:
    """One preset value, by upstream's rules for the group's mappings."""
    where = f"planner.{group}: {key}"
    if key in ("enable_throughput_scaling", "enable_load_scaling", "load_predictor_log1p"):
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false (got {value!r})")
    elif key == "load_predictor":
        if value not in PREDICTOR_FAMILIES:
            raise ValueError(f"{where} must be one of {', '.join(PREDICTOR_FAMILIES)} (got {value!r})")
    elif key in ("throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds"):
        if value is not None and not (_is_int(value) and value > 0):
            raise ValueError(f"{where} must be a positive integer or null (got {value!r})")
    elif key == "load_scaling_down_sensitivity":
        if not (_is_int(value) and 0 <= value <= 100):
            raise ValueError(f"{where} must be an integer in [0, 100] (got {value!r})")
    elif key in ("kalman_q_level", "kalman_q_trend", "kalman_r"):
        if not (_is_number(value) and value > 0):
            raise ValueError(f"{where} must be a positive number (got {value!r})")
    elif not (_is_int(value) and value > 0):
        raise ValueError(f"{where} must be a positive integer (got {value!r})")
    if key == "fpm_sample_bucket_size" and math.isqrt(value) ** 2 != value:
        raise ValueError(f"{where} must be a perfect square (got {value!r})")


def _check_mapping(group: str, index: int, mapping: dict[str, Any]) -> dict[str, Any]:
    keys = GROUP_KEYS[group]
    unknown = sorted(set(mapping) - set(keys))
    missing = [k for k in keys if k not in mapping]
    if unknown:
        raise ValueError(f"planner.{group}.preset[{index}] has unknown keys {unknown}; allowed: {list(keys)}")
    if missing:
        raise ValueError(f"planner.{group}.preset[{index}] is missing the keys {missing} (a preset mapping "
                         "sets every key of its group)")
    for key in keys:
        _check_field(group, key, mapping[key])
    if group == "scaling_policy" and not (mapping["enable_throughput_scaling"] or mapping["enable_load_scaling"]) \
            and (mapping["throughput_adjustment_interval_seconds"] is not None
                 or mapping["load_adjustment_interval_seconds"] is not None):
        raise ValueError(f"planner.scaling_policy.preset[{index}]: a policy that scales nothing takes null "
                         "adjustment intervals")
    return {k: mapping[k] for k in keys}


def _domain_values(name: str, value: Any, default: tuple[Any, ...]) -> list[Any]:
    """The finite values of a flat key's domain (`preset: false`)."""
    if value is None:
        return list(default)
    if isinstance(value, dict) and set(value) == {"choices"}:
        return list(Choices.model_validate(value).choices)
    if isinstance(value, dict) and set(value) == {"range"}:
        spec = Range.model_validate(value).range
        integer = spec.min == int(spec.min) and spec.max == int(spec.max) and isinstance(default[0], int) \
            and not isinstance(default[0], bool)
        if spec.scale == "log":
            return list(range(int(spec.min), int(spec.max) + 1)) if integer else [spec.min, spec.max]
        if spec.step is None:
            raise ValueError(f"planner.{name}: a linear range needs a step here (the planner's knobs are "
                             "searched as a finite set)")
        count = int(math.floor((spec.max - spec.min) / spec.step + 1e-9)) + 1
        values = [spec.min + i * spec.step for i in range(count)]
        return [int(round(v)) for v in values] if integer and spec.step == int(spec.step) else values
    if isinstance(value, dict):
        raise ValueError(f"planner.{name}: a domain is a value, {{choices: [...]}} or {{range: {{...}}}}")
    return [value]


class PresetGroup(BaseModel):
    """One preset group: `preset: default` (every named preset), a list, or false (flat keys)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preset: Literal["default", False] | list[str | dict[str, Any]] | dict[str, Any] = "default"
    type: Any = None
    """load_predictor with `preset: false` only: the predictor family, a value or {choices}."""

    @field_validator("preset")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if value:
                raise ValueError("a preset mapping must be empty ({} turns presets off, as false)")
            return False
        if isinstance(value, list) and not value:
            raise ValueError("preset list must be non-empty")
        return value


class PlannerDomains(BaseModel):
    """The `planner:` section of a recommend config (see the module docstring). Keys outside the
    groups and the searched ones (`max_num_gpus`, `max_throughput_scaling_replicas`, ...) are
    passed to every enabled candidate as written and validated by the `predict` schema."""

    model_config = ConfigDict(frozen=True, extra="allow")

    policy: Any = Field(default_factory=lambda: Choices(choices=list(POLICIES)))
    target: Literal["throughput", "latency", "load", "sla"] | None = None
    scaling_policy: PresetGroup | None = None
    fpm_sampling: PresetGroup | None = None
    load_sensitivity: PresetGroup | None = None
    load_predictor: PresetGroup | None = None
    min_workers: Any = None
    prefill_min_workers: Any = None
    decode_min_workers: Any = None

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        values = Choices.model_validate(value).choices if isinstance(value, dict) else [value]
        bad = [v for v in values if v not in POLICIES]
        if bad:
            raise ValueError(f"planner.policy must be enabled or disabled (got {bad})")
        return Choices(choices=values) if isinstance(value, dict) else value

    @field_validator("load_predictor", mode="before")
    @classmethod
    def _predictor_group(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(f"in a recommend config planner.load_predictor is a preset group: write "
                             f"{{preset: false, type: {value}}} for one family, or {{preset: [...]}}")
        return value

    @field_validator("min_workers", "prefill_min_workers", "decode_min_workers")
    @classmethod
    def _workers(cls, value: Any, info: Any) -> Any:
        if value is None:
            return None
        minimum = 0 if info.field_name == "min_workers" else 1

        def check(item: Any) -> None:
            if not (_is_int(item) and item >= minimum):
                raise ValueError(f"planner.{info.field_name} must be an integer >= {minimum} (got {item!r})")

        return domain_parser(int, check)(value)

    @model_validator(mode="after")
    def _groups_and_knobs(self) -> PlannerDomains:
        extra = self.model_extra or {}
        for group in GROUPS:
            control = getattr(self, group)
            independent = control is not None and control.preset is False
            flat = [k for k in GROUP_KEYS[group] if k != "load_predictor" and k in extra]
            if flat and not independent:
                state = "omitted (every named preset)" if control is None else "given as presets"
                raise ValueError(f"planner.{group} is {state} and cannot be combined with its flat keys {flat}; "
                                 f"write planner.{group}: {{preset: false}} to search them")
            if control is not None and control.type is not None and not (group == "load_predictor" and independent):
                raise ValueError(f"planner.{group}.type is only read by load_predictor with preset: false")
        self.presets()  # every preset valid
        return self

    @property
    def policies(self) -> list[str]:
        return list(self.policy.choices) if isinstance(self.policy, Choices) else [self.policy]

    def _entries(self, group: str) -> list[dict[str, Any]]:
        control = getattr(self, group)
        if control is None or control.preset == "default":
            return [dict(v) for v in PRESETS[group].values()]
        if isinstance(control.preset, list):
            out = []
            for index, entry in enumerate(control.preset):
                if isinstance(entry, str):
                    if entry not in PRESETS[group]:
                        raise ValueError(f"planner.{group}.preset has no preset {entry!r}; allowed: "
                                         f"{list(PRESETS[group])}")
                    out.append(dict(PRESETS[group][entry]))
                else:
                    out.append(_check_mapping(group, index, entry))
            return out
        extra = self.model_extra or {}
        dims = []
        for key, default in zip(GROUP_KEYS[group], INDEPENDENT_DEFAULTS[group], strict=True):
            raw = control.type if key == "load_predictor" else extra.get(key)
            name = f"{group}.type" if key == "load_predictor" else key
            values = _domain_values(name, raw, default)
            for value in values:
                _check_field(group, key, value)
            dims.append(values)
        return [dict(zip(GROUP_KEYS[group], combo, strict=True)) for combo in itertools.product(*dims)]

    def presets(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per group, label -> the planner keys it sets (in the config's order, equal ones once)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for group in GROUPS:
            labelled: dict[str, dict[str, Any]] = {}
            for fields in self._entries(group):
                labelled.setdefault(_label(group, fields), _relevant(group, fields))
            out[group] = labelled
        return out

    def scaling_policies(self, *, sla_target: bool) -> list[str]:
        """The scaling_policy labels a search keeps: throughput scaling only when the planner
        runs with target sla (a goodput target with ttft_ms and itl_ms); a list that names a
        dropped one is refused, as upstream."""
        labels = list(self.presets()["scaling_policy"])
        kept = [label for label in labels if sla_target or not scales(label)[0]]
        dropped = [label for label in labels if label not in kept]
        control = self.scaling_policy
        if dropped and control is not None and isinstance(control.preset, list):
            raise ValueError(f"planner.scaling_policy {dropped} scale(s) by throughput, which needs a goodput "
                             "target and an evaluation.sla with ttft_ms and itl_ms")
        if not kept:
            raise ValueError("every planner.scaling_policy scales by throughput, which needs a goodput target "
                             "and an evaluation.sla with ttft_ms and itl_ms")
        return kept


def planner_target(optimization_target: str, pareto_goodput: bool = False) -> str:
    """The planner's target a search uses when `planner.target` is omitted (upstream's mapping)."""
    if optimization_target == "pareto":
        return "sla" if pareto_goodput else "throughput"
    return {"ttft": "latency", "e2e_latency": "latency", "goodput": "sla", "goodput_per_gpu": "sla",
            "min_gpus": "sla"}.get(optimization_target, "throughput")
