"""Rules of recommend's knob domains and dimensions (search/domains.py, search/space.py): a
range needs min ≤ max (equal is one value, not searched), a log range min > 0 and no step; a
step grid holds every min + i·step up to max (float slack of 1e-9 steps) and at most
MAX_DOMAIN_VALUES values; an integer range needs integer bounds and, when linear, a step;
choices are non-empty and distinct, one choice is not searched; a log-scaled integer range is
sampled within its bounds."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from servesim.limits import MAX_DOMAIN_VALUES
from servesim.search.domains import Choices, Range, RangeSpec, domain_parser, range_size
from servesim.search.space import Dim, dim_from_domain, fixed_value


def _range(**spec) -> Range:
    return Range(range=RangeSpec(**spec))


def test_a_range_needs_min_at_most_max():
    assert _range(min=3.0, max=3.0).range.max == 3.0
    with pytest.raises(ValidationError, match="min <= max"):
        _range(min=3.0, max=2.999)


@pytest.mark.parametrize("spec", [{"min": 0.0, "max": 1.0, "scale": "log"},
                                  {"min": -1.0, "max": 1.0, "scale": "log"},
                                  {"min": 1.0, "max": 8.0, "step": 1.0, "scale": "log"}])
def test_a_log_range_needs_a_positive_min_and_no_step(spec):
    with pytest.raises(ValidationError, match="log range"):
        _range(**spec)


def test_a_tiny_positive_min_is_a_log_range():
    assert _range(min=1e-9, max=1.0, scale="log").range.scale == "log"


@pytest.mark.parametrize(("spec", "integer", "size"), [
    ({"min": 0.0, "max": 10.0, "step": 2.5}, False, 5),
    ({"min": 0.0, "max": 9.9, "step": 2.5}, False, 4),
    ({"min": 0.0, "max": 0.3, "step": 0.1}, False, 4),   # 0.3 / 0.1 = 2.9999999999999996
    ({"min": 1.0, "max": 8.0}, True, 8),
    ({"min": 5.0, "max": 5.0}, True, 1),
    ({"min": 0.0, "max": 1.0}, False, None),
])
def test_range_sizes(spec, integer, size):
    assert range_size(RangeSpec(**spec), integer=integer) == size


def test_a_range_holds_at_most_max_domain_values():
    parse = domain_parser(int, lambda v: None)
    assert parse({"range": {"min": 1.0, "max": float(MAX_DOMAIN_VALUES), "step": 1.0}})
    with pytest.raises(ValueError, match="at most"):
        parse({"range": {"min": 1.0, "max": float(MAX_DOMAIN_VALUES + 1), "step": 1.0}})


def test_integer_ranges():
    parse = domain_parser(int, lambda v: None)
    with pytest.raises(ValueError, match="integer min, max and step"):
        parse({"range": {"min": 1.5, "max": 4.0, "step": 1.0}})
    with pytest.raises(ValueError, match="integer min, max and step"):
        parse({"range": {"min": 1.0, "max": 4.0, "step": 1.5}})
    with pytest.raises(ValueError, match="requires step"):
        parse({"range": {"min": 1.0, "max": 4.0}})
    assert parse({"range": {"min": 1.0, "max": 64.0, "scale": "log"}}).range.scale == "log"


def test_each_bound_is_checked():
    seen: list = []
    domain_parser(int, seen.append)({"range": {"min": 2.0, "max": 6.0, "step": 2.0}})
    assert seen == [2, 6] and all(isinstance(v, int) for v in seen)


def test_choices_are_non_empty_and_distinct():
    with pytest.raises(ValidationError, match="non-empty"):
        Choices(choices=[])
    with pytest.raises(ValidationError, match="repeat"):
        Choices(choices=[1, 2, 1])
    assert Choices(choices=[1, 1.5]).choices == [1, 1.5]


def test_one_value_domains_are_not_searched():
    assert dim_from_domain("k", Choices(choices=[4]), integer=True) is None
    assert dim_from_domain("k", _range(min=2.0, max=2.0), integer=True) is None
    assert dim_from_domain("k", 7, integer=True) is None
    assert dim_from_domain("k", Choices(choices=[4, 8]), integer=True) == Dim("k", (4, 8), integer=True)


def test_dimensions_of_ranges():
    grid = dim_from_domain("k", _range(min=8.0, max=32.0, step=8.0), integer=True)
    assert grid is not None and grid.values == (8, 16, 24, 32) and grid.stride == 8
    floats = dim_from_domain("k", _range(min=0.1, max=0.4, step=0.1), integer=False)
    assert floats is not None and floats.values == (0.1, 0.2, 0.3, 0.4)
    whole = dim_from_domain("k", _range(min=1.0, max=4.0, scale="log"), integer=True)
    assert whole is not None and whole.values == (1, 2, 3, 4) and whole.log and (whole.low, whole.high) == (1.0, 4.0)
    cont = dim_from_domain("k", _range(min=0.5, max=0.9), integer=False)
    assert cont is not None and not cont.finite and (cont.low, cont.high, cont.log) == (0.5, 0.9, False)


def test_log_integer_samples_stay_within_the_bounds_and_reach_both():
    dim = Dim("k", (1, 2, 3, 4), 1.0, 4.0, log=True, integer=True)
    rng = random.Random(3)
    seen = {dim.sample(rng) for _ in range(400)}
    assert seen == {1, 2, 3, 4}
    cont = Dim("k", (), 2.0, 8.0, log=True)
    draws = [cont.sample(rng) for _ in range(400)]
    assert 2.0 <= min(draws) and max(draws) <= 8.0
    assert sum(d < 4.0 for d in draws) == pytest.approx(200, abs=40), "log-uniform: half below the geometric mean"


def test_the_fixed_value_of_a_domain():
    assert fixed_value(Choices(choices=[3, 5])) == 3
    assert fixed_value(_range(min=2.0, max=2.0), integer=True) == 2
    assert isinstance(fixed_value(_range(min=2.0, max=2.0), integer=True), int)
    assert fixed_value(_range(min=0.5, max=0.5)) == 0.5
    assert fixed_value(9) == 9
