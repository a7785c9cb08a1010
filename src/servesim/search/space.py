"""The search space of a recommend config: branches, parallel pools and knob dimensions.

A *branch* is one engine mode (aggregated or disaggregated), as in the reference. Within a
branch a candidate picks

* a backend (`engine.backend`),
* a *deployment*: one parallel shape per role (`engine.workers.<role>.parallelism`), drawn from
  the role's pool — every legal shape within the GPU budget (`preset: default`), the listed
  shapes, or the product of the per-knob domains (`preset: false`),
* one value per knob dimension: the scheduler and KV-cache knobs of each role and the load.

Knob names are the dotted paths of the YAML keys they set (`engine.workers.aggregated.scheduler.
max_sequences`), so a candidate reads as the config it stands for.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from servesim.search.schema import (
    PARALLEL_KEYS,
    ROUTER_KV_DEFAULTS,
    ROUTER_KV_KNOBS,
    Choices,
    Range,
    RecommendConfig,
    WorkerDomains,
)
from servesim.errors import ConfigError
from servesim.limits import MAX_POOL_SHAPES, MAX_WORKERS
from servesim.search.deployments import Deployments, Shape
from servesim.search.domains import range_size
from servesim.search.planner_domains import scales

GPUS_PER_WORKER_LADDER = (1, 2, 4, 8, 16)
"""GPUs per worker the default pool tries (the reference's ladder)."""

ROLE_DEFAULTS = {
    "max_batched_tokens": {"aggregated": (8192, 16384, 32768), "prefill": (8192, 16384, 32768), "decode": (8192,)},
    "max_sequences": {"aggregated": (256, 512, 1024), "prefill": (1, 2, 4, 8, 16, 32, 64, 128, 256),
                      "decode": (256, 512, 1024)},
}
"""The reference's domains for scheduler knobs a recommend config leaves out."""

ROLES_OF = {"aggregated": ("aggregated",), "disaggregated": ("prefill", "decode")}


@dataclass(frozen=True)
class Dim:
    """One knob: a finite list of `values`, or a continuous interval [low, high] (`log`: sampled
    log-uniformly). Integer log ranges are finite but keep their bounds for log sampling."""

    name: str
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    integer: bool = False
    stride: int = 0
    """An integer step range's step (its values are evenly spaced); 0 otherwise."""

    @property
    def finite(self) -> bool:
        return bool(self.values)

    def sample(self, rng: random.Random) -> Any:
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
            return min(int(self.high), max(int(self.low), round(x))) if self.integer else x
        if self.values:
            return rng.choice(self.values)
        return rng.uniform(self.low, self.high)


def dim_from_domain(name: str, domain: Any, *, integer: bool) -> Dim | None:
    """A Dim for a choices/range domain; None for a plain value (not searched)."""
    if isinstance(domain, Choices):
        return Dim(name, tuple(domain.choices), integer=integer) if len(domain.choices) > 1 else None
    if not isinstance(domain, Range):
        return None
    spec = domain.range
    if spec.min == spec.max:
        return None
    if spec.step is not None:
        count = range_size(spec, integer=integer) or 1
        values = tuple(spec.min + i * spec.step for i in range(count))
        if not integer:
            return Dim(name, tuple(round(v, 12) for v in values))
        return Dim(name, tuple(int(round(v)) for v in values), integer=True, stride=int(spec.step))
    if integer:
        return Dim(name, tuple(range(int(spec.min), int(spec.max) + 1)), spec.min, spec.max,
                   log=spec.scale == "log", integer=True)
    return Dim(name, (), spec.min, spec.max, log=spec.scale == "log")


def fixed_value(domain: Any, integer: bool = False) -> Any:
    """The value of a domain that is not searched (a plain value or a one-point domain)."""
    if isinstance(domain, Choices):
        return domain.choices[0]
    if isinstance(domain, Range):
        return int(domain.range.min) if integer else domain.range.min
    return domain


@dataclass(frozen=True)
class Candidate:
    """One point of the space: everything a concrete `predict` config is made from."""

    mode: str
    backend: str
    shapes: tuple[tuple[str, Shape], ...]
    knobs: tuple[tuple[str, Any], ...]

    @property
    def used_gpus(self) -> int:
        return sum(shape.gpus for _, shape in self.shapes)

    def shape(self, role: str) -> Shape:
        return dict(self.shapes)[role]

    def knob(self, name: str, default: Any = None) -> Any:
        return dict(self.knobs).get(name, default)

    def flat_knobs(self) -> dict[str, Any]:
        """Every chosen value, keyed by YAML path."""
        out: dict[str, Any] = {"engine.mode": self.mode, "engine.backend": self.backend}
        for role, shape in self.shapes:
            out.update({f"engine.workers.{role}.parallelism.{k}": v for k, v in shape.as_dict().items()})
        out.update(self.knobs)
        if out.get("router.policy", "kv_router") != "kv_router":  # the KV router's knobs do not apply
            out = {k: v for k, v in out.items() if k == "router.policy" or not k.startswith("router.")}
        if "planner.policy" in out:  # a planner's knobs only where its scaling policy uses them
            throughput, load = scales(out.get("planner.scaling_policy", "disabled"))
            if out["planner.policy"] == "disabled" or not (throughput or load):
                out = {k: v for k, v in out.items() if not k.startswith("planner.")} | {"planner.policy": "disabled"}
            else:
                unused = ({"planner.fpm_sampling", "planner.load_predictor"} if not throughput else set()) | (
                    {"planner.load_sensitivity"} if not load else set())
                out = {k: v for k, v in out.items() if k not in unused}
        return out


@dataclass
class RolePool:
    """The parallel shapes one role may take, per backend."""

    role: str
    kind: str
    """'default' (legal shapes within the budget), 'list' (preset list) or 'independent'."""
    by_backend: dict[str, list[Shape]]
    knob_dims: list[Dim] = field(default_factory=list)
    """For 'independent' pools: one Dim per parallel knob (what a model-guided search varies)."""


@dataclass
class Branch:
    """One engine mode: its backends, one pool per role and the knob dimensions."""

    mode: str
    backends: list[str]
    pools: dict[str, RolePool]
    dims: list[Dim]
    fixed: dict[str, Any]
    """Knobs with one value (plain values and one-point domains), keyed by YAML path."""
    min_gpus: int
    max_gpus: int
    _deployments: dict[str, Deployments] = field(default_factory=dict, repr=False)

    @property
    def roles(self) -> tuple[str, ...]:
        return ROLES_OF[self.mode]

    def deployments(self, backend: str) -> Deployments:
        """Every combination of role shapes for `backend`, default-pool ones within the budget
        (counted and indexed, never listed: `deployments.py`)."""
        found = self._deployments.get(backend)
        if found is None:
            pools = [self.pools[role] for role in self.roles]
            explicit = any(pool.kind != "default" for pool in pools)
            found = self._deployments[backend] = Deployments(
                [pool.by_backend.get(backend, []) for pool in pools], None if explicit else (self.min_gpus, self.max_gpus))
        return found

    def unsupported(self, cand: Candidate) -> str | None:
        """Why a default-pool shape cannot serve with the candidate's backend, or None."""
        for role, shape in cand.shapes:
            pool = self.pools[role]
            if pool.kind == "default" and shape not in pool.by_backend.get(cand.backend, ()):
                return f"{role}: {shape.label} is not a split backend {cand.backend} runs with a KV budget"
        return None

    def candidate(self, backend: str, shapes: tuple[Shape, ...], values: dict[str, Any]) -> Candidate:
        knobs = {**self.fixed, **values}
        return Candidate(self.mode, backend, tuple(zip(self.roles, shapes, strict=True)), tuple(sorted(knobs.items())))

    @property
    def finite(self) -> bool:
        return all(d.finite for d in self.dims)

    def first_values(self) -> dict[str, Any]:
        """The first value of every knob (a representative candidate)."""
        return {d.name: (d.values[0] if d.values else d.low) for d in self.dims}

    def grid_size(self) -> int:
        """Distinct candidates of the grid (counted, not listed): combinations that differ only in
        knobs their router or planner policy does not use are one."""
        if not self.finite:
            return 0
        plain, conditional = self._split_dims()
        knobs = math.prod(len(d.values) for d in plain) * conditional_count(conditional, self.fixed)
        return sum(len(self.deployments(b)) for b in self.backends) * knobs

    def grid(self) -> Iterator[Candidate]:
        """Every distinct candidate in a fixed order (backend, deployment, knobs; of combinations
        that differ only in unused router/planner knobs, the first)."""
        plain, conditional = self._split_dims()
        names = [d.name for d in plain] + [d.name for d in conditional]
        for backend in self.backends:
            for shapes in self.deployments(backend):
                for values in itertools.product(*(d.values for d in plain)):
                    for tail in distinct_conditional(conditional, self.fixed):
                        yield self.candidate(backend, shapes, dict(zip(names, values + tail, strict=True)))

    def _split_dims(self) -> tuple[list[Dim], list[Dim]]:
        """The dims as (plain, conditional: router and planner knobs); the conditional ones come
        last in `dims`, so the grid keeps the order of the full product."""
        conditional = [d for d in self.dims if _conditional(d.name)]
        plain = [d for d in self.dims if not _conditional(d.name)]
        assert self.dims == plain + conditional, "router/planner knobs are the branch's last dims"
        return plain, conditional

    def sample(self, rng: random.Random) -> Candidate | None:
        """A uniform draw: backend, then a deployment legal for it, then each knob."""
        backend = rng.choice(self.backends)
        deployments = self.deployments(backend)
        if not deployments:
            return None
        shapes = rng.choice(deployments)
        return self.candidate(backend, shapes, {d.name: d.sample(rng) for d in self.dims})


def _conditional(name: str) -> bool:
    return name.startswith(("router.", "planner."))


def _projection(names: list[str], values: tuple[Any, ...], fixed: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The router/planner knobs a candidate with these values really carries (`flat_knobs`)."""
    probe = Candidate("aggregated", "vllm", (), tuple(sorted({**fixed, **dict(zip(names, values, strict=True))}.items())))
    return tuple(sorted((k, repr(v)) for k, v in probe.flat_knobs().items() if _conditional(k)))


def distinct_conditional(dims: list[Dim], fixed: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """The value combinations of the router/planner dims, in product order, each distinct set of
    used knobs once (the first combination that carries it)."""
    names = [d.name for d in dims]
    seen: set[tuple[tuple[str, Any], ...]] = set()
    for values in itertools.product(*(d.values for d in dims)):
        key = _projection(names, values, fixed)
        if key not in seen:
            seen.add(key)
            yield values


def conditional_count(dims: list[Dim], fixed: dict[str, Any]) -> int:
    """How many distinct combinations `distinct_conditional` yields, counted arithmetically."""
    by_name = {d.name: d.values for d in dims}

    def values(name: str, default: Any) -> tuple[Any, ...]:
        return by_name.get(name) or ((fixed[name],) if name in fixed else (default,))

    def product(names: list[str]) -> int:
        return math.prod(len(by_name[n]) for n in names)

    router = [n for n in by_name if n.startswith("router.") and n != "router.policy"]
    router_count = sum(product(router) if policy == "kv_router" else 1 for policy in values("router.policy", "kv_router"))
    planner = [n for n in by_name if n.startswith("planner.") and n not in ("planner.policy", "planner.scaling_policy")]
    if not planner and "planner.policy" not in by_name and "planner.scaling_policy" not in by_name:
        return router_count
    policies = values("planner.policy", None)
    collapsed, used = False, 0
    for scaling in values("planner.scaling_policy", "disabled"):
        throughput, load = scales(scaling)
        if not (throughput or load):
            collapsed = True
            continue
        unused = ({"planner.fpm_sampling", "planner.load_predictor"} if not throughput else set()) | (
            {"planner.load_sensitivity"} if not load else set())
        used += product([n for n in planner if n not in unused])
    enabled = sum(policy != "disabled" for policy in policies)
    collapsed = collapsed and enabled > 0 or enabled < len(policies)
    return router_count * (int(collapsed) + enabled * used)


ShapeFilter = Callable[[str, str, Shape], bool]
"""(backend, role, shape) -> whether the shape can serve at all (the default pools' pre-filter)."""


def build_branches(cfg: RecommendConfig, moe: bool, shape_ok: ShapeFilter) -> list[Branch]:
    """One Branch per engine mode of the config."""
    constraints = cfg.optimization.constraints
    low, high = constraints.min_candidate_gpus or 1, constraints.max_candidate_gpus
    branches = []
    for mode in dict.fromkeys(cfg.engine.modes):
        roles = ROLES_OF[mode]
        share = high if mode == "aggregated" else high - 1
        pools = {role: _role_pool(role, _worker(cfg, role), cfg.engine.backends, moe, share, shape_ok)
                 for role in roles}
        dims, fixed = _knob_dims(cfg, roles)
        branches.append(Branch(mode, list(dict.fromkeys(cfg.engine.backends)), pools, dims, fixed, low, high))
    return branches


def _worker(cfg: RecommendConfig, role: str) -> WorkerDomains:
    worker = getattr(cfg.engine.workers, role)
    assert worker is not None
    return worker


def _role_pool(role: str, worker: WorkerDomains, backends: list[str], moe: bool, budget: int,
               shape_ok: ShapeFilter) -> RolePool:
    par = worker.parallelism
    if isinstance(par.preset, list):
        shapes = [Shape(**entry) for entry in par.preset]
        return RolePool(role, "list", {b: shapes for b in backends})
    default = {b: _servable(ladder_shapes(moe, b, budget), functools.partial(shape_ok, b, role)) for b in backends}
    if par.preset == "default":
        return RolePool(role, "default", default)
    dims = []
    for key in PARALLEL_KEYS:
        domain = getattr(par, key)
        if domain is None:
            seen = sorted({getattr(s, key) for shapes in default.values() for s in shapes} or {1})
            dims.append(Dim(f"engine.workers.{role}.parallelism.{key}", tuple(seen), integer=True))
        else:
            dims.append(dim_from_domain(f"engine.workers.{role}.parallelism.{key}", domain, integer=True)
                        or Dim(f"engine.workers.{role}.parallelism.{key}", (fixed_value(domain, True),), integer=True))
    size = math.prod(len(d.values) for d in dims)
    if size > MAX_POOL_SHAPES:
        raise ConfigError(f"engine.workers.{role}.parallelism: preset: false with these knobs makes {size:,} shapes "
                          f"(the product of their value counts); at most {MAX_POOL_SHAPES:,}")
    shapes = [Shape(*values) for values in itertools.product(*(d.values for d in dims))]
    return RolePool(role, "independent", {b: shapes for b in backends}, dims)


def _servable(shapes: list[Shape], shape_ok: Callable[[Shape], bool]) -> list[Shape]:
    """The shapes whose worker split can serve (checked once per split: a rank's KV pool does
    not depend on the replica count) and whose scheduler ranks stay within `MAX_WORKERS`."""
    verdicts: dict[tuple[int, ...], bool] = {}
    out = []
    for shape in shapes:
        split = _split_of(shape)
        if split not in verdicts:
            verdicts[split] = shape_ok(Shape(1, *split))
        if verdicts[split] and shape.replicas * shape.attention_data <= MAX_WORKERS:
            out.append(shape)
    return out


def _split_of(shape: Shape) -> tuple[int, int, int, int, int]:
    return shape.tensor, shape.pipeline, shape.attention_data, shape.moe_tensor, shape.moe_expert


def ladder_shapes(moe: bool, backend: str, budget: int) -> list[Shape]:
    """Worker splits on the GPUs-per-worker ladder, times every replica count within `budget`.

    Dense models use plain tensor parallelism; MoE models the real-silicon patterns: attention
    TP with expert parallelism (TEP), attention DP with expert parallelism (DEP), and MoE tensor
    parallelism under either attention mode — minus what each backend cannot run.
    """
    shapes = []
    for g in GPUS_PER_WORKER_LADDER:
        if g > budget:
            continue
        for split in _worker_splits(g, moe, backend):
            shapes += [Shape(r, *split) for r in range(1, budget // g + 1)]
    return shapes


def _worker_splits(g: int, moe: bool, backend: str) -> list[tuple[int, int, int, int, int]]:
    """(tensor, pipeline, attention_data, moe_tensor, moe_expert) splits of a g-GPU worker."""
    if not moe or g == 1:
        return [(g, 1, 1, 1, 1)]
    splits = []
    ladder = [v for v in GPUS_PER_WORKER_LADDER if v <= g]
    for tp, dp, mtp, ep in itertools.product(ladder, ladder, ladder, ladder):
        if tp * dp != g or mtp * ep != g:
            continue
        tep = tp > 1 and dp == 1 and mtp == 1 and ep > 1
        dep = tp == 1 and dp > 1 and mtp == 1 and ep > 1
        moe_tp = mtp > 1 and ep == 1 and (tp > 1) != (dp > 1)
        if not (tep or dep or moe_tp):
            continue
        if (backend == "trtllm" and dp > 1 and tp > 1) or (backend == "vllm" and mtp > 1 and ep > 1):
            continue
        splits.append((tp, 1, dp, mtp, ep))
    return splits


def _knob_dims(cfg: RecommendConfig, roles: tuple[str, ...]) -> tuple[list[Dim], dict[str, Any]]:
    """The searched knobs (Dims) and the fixed ones of a branch's roles and the load."""
    dims: list[Dim] = []
    fixed: dict[str, Any] = {}

    def add(name: str, domain: Any, *, integer: bool, default: tuple[Any, ...] | None = None) -> None:
        if domain is None and default is not None:
            domain = Choices(choices=list(default)) if len(default) > 1 else default[0]
        if domain is None:
            return
        dim = dim_from_domain(name, domain, integer=integer)
        if dim is not None:
            dims.append(dim)
        else:
            fixed[name] = fixed_value(domain, integer)

    for role in roles:
        worker = _worker(cfg, role)
        base = f"engine.workers.{role}"
        add(f"{base}.scheduler.max_batched_tokens", worker.scheduler.max_batched_tokens, integer=True,
            default=ROLE_DEFAULTS["max_batched_tokens"][role])
        add(f"{base}.scheduler.max_sequences", worker.scheduler.max_sequences, integer=True,
            default=ROLE_DEFAULTS["max_sequences"][role])
        add(f"{base}.kv_cache.block_size", worker.kv_cache.block_size, integer=True)
        add(f"{base}.kv_cache.capacity.memory_fraction", worker.kv_cache.capacity.memory_fraction, integer=False)
    load = cfg.traffic.load if cfg.traffic is not None else None
    if load is not None and load.searched_key is not None:
        key = load.searched_key
        add(f"traffic.load.{key}", getattr(load, key), integer=key == "concurrency")
    router = cfg.router
    if router is not None:
        add("router.policy", Choices(choices=router.policies) if len(router.policies) > 1 else router.policies[0],
            integer=False)
        if "kv_router" in router.policies:
            models = router.load_models
            add("router.prefill_load_model.type", Choices(choices=models) if len(models) > 1 else models[0],
                integer=False)
            for knob in ROUTER_KV_KNOBS:
                add(f"router.{knob}", getattr(router, knob), integer=False, default=ROUTER_KV_DEFAULTS[knob])
    planner = cfg.planner
    if planner is not None:
        def categorical(name: str, values: list[Any]) -> None:
            add(name, Choices(choices=values) if len(values) > 1 else values[0], integer=False)

        categorical("planner.policy", planner.policies)
        if "enabled" in planner.policies:
            presets = planner.presets()
            policies = planner.scaling_policies(sla_target=cfg.planner_sla_target)
            categorical("planner.scaling_policy", policies)
            if any(scales(p)[0] for p in policies):
                categorical("planner.fpm_sampling", list(presets["fpm_sampling"]))
                categorical("planner.load_predictor", list(presets["load_predictor"]))
            if any(scales(p)[1] for p in policies):
                categorical("planner.load_sensitivity", list(presets["load_sensitivity"]))
            for key in ("min_workers",) + (("prefill_min_workers", "decode_min_workers") if "prefill" in roles else ()):
                if getattr(planner, key) is not None:
                    add(f"planner.{key}", getattr(planner, key), integer=True)
    return dims, fixed
