"""Demand forecasters of the planner's throughput scaling (servesim.scaling.forecast)."""

from __future__ import annotations

import math

import pytest

from servesim.scaling.forecast import (
    ConstantForecaster,
    LinearTrendForecaster,
    LocalLinearTrendForecaster,
    MovingAverageForecaster,
    make_forecaster,
)


def fed(forecaster, values):
    """The forecaster after observing `values` in order."""
    for v in values:
        forecaster.observe(v)
    return forecaster


def test_constant_predicts_the_last_value_and_zero_before_any() -> None:
    f = ConstantForecaster()
    assert f.predict() == 0.0
    assert fed(f, [3, 7, 5]).predict() == 5.0


def test_leading_zeros_are_skipped_but_later_zeros_count() -> None:
    f = fed(MovingAverageForecaster(window=3), [0, 0, 0, 6])
    assert f.count == 1 and f.predict() == 6.0
    fed(f, [0, 0])
    assert f.predict() == pytest.approx(2.0)


def test_nan_counts_as_zero_and_negative_values_are_clipped() -> None:
    f = fed(ConstantForecaster(), [4, float("nan")])
    assert f.predict() == 0.0
    assert fed(ConstantForecaster(), [4, -3]).predict() == 0.0


def test_moving_average_over_its_window() -> None:
    f = fed(MovingAverageForecaster(window=3), [1, 2, 3, 4, 5])
    assert f.predict() == pytest.approx(4.0)


def test_moving_average_warms_up_on_the_last_value() -> None:
    f = fed(MovingAverageForecaster(window=3, min_points=3), [10, 20])
    assert f.predict() == 20.0
    f.observe(30)
    assert f.predict() == pytest.approx(20.0)


def test_local_linear_trend_returns_the_last_value_until_min_points() -> None:
    f = LocalLinearTrendForecaster(min_points=5)
    fed(f, [12, 15, 11, 30])
    assert f.predict() == 30.0


def test_local_linear_trend_matches_a_reference_kalman_filter() -> None:
    # level/trend filter, P0 = 1000·I, Q = diag(1, 0.1), R = 10, first point initialises the
    # level; values checked against a textbook (filterpy) implementation of the same model
    f = fed(LocalLinearTrendForecaster(1.0, 0.1, 10.0, 5), [0, 0, 12, 15, 11, 30, 42])
    assert f.predict() == pytest.approx(49.493341837, abs=1e-8)
    fed(f, [41, 60, 20, 5, 0, 0])
    assert f.predict() == pytest.approx(2.119305742, abs=1e-8)


def test_local_linear_trend_is_exact_on_a_constant_series() -> None:
    f = fed(LocalLinearTrendForecaster(), [7.0] * 20)
    assert f.predict() == 7.0


def test_local_linear_trend_follows_a_ramp() -> None:
    f = fed(LocalLinearTrendForecaster(), [10.0 * i for i in range(1, 60)])
    assert f.predict() == pytest.approx(600.0, rel=1e-3)


def test_linear_trend_extrapolates_a_line_exactly() -> None:
    f = fed(LinearTrendForecaster(window=10), [3.0 + 2.0 * i for i in range(8)])
    assert f.predict() == pytest.approx(19.0)


def test_linear_trend_only_fits_its_window_and_never_goes_negative() -> None:
    f = fed(LinearTrendForecaster(window=5), [100, 100, 100, 50, 40, 30, 20, 10])
    assert f.predict() == pytest.approx(0.0)  # 50..10 extrapolates to 0
    assert fed(LinearTrendForecaster(window=5), [40, 30, 20, 10, 1]).predict() == 0.0


def test_log1p_forecasts_map_back_to_the_original_scale() -> None:
    f = fed(MovingAverageForecaster(window=2, log1p=True), [math.e - 1, math.e ** 3 - 1])
    assert f.predict() == pytest.approx(math.e ** 2 - 1)
    assert fed(LocalLinearTrendForecaster(log1p=True), [50.0] * 10).predict() == pytest.approx(50.0)


@pytest.mark.parametrize(("kind", "cls", "min_points"), [
    ("constant", ConstantForecaster, 1),
    ("moving_average", MovingAverageForecaster, 1),
    ("kalman", LocalLinearTrendForecaster, 3),
    ("arima", LocalLinearTrendForecaster, 5),
    ("prophet", LinearTrendForecaster, 5),
])
def test_make_forecaster_maps_every_predictor(kind: str, cls: type, min_points: int) -> None:
    f = make_forecaster(kind, kalman_min_points=3)
    assert isinstance(f, cls) and f.min_points == min_points


def test_make_forecaster_passes_windows_and_rejects_unknown_kinds() -> None:
    assert fed(make_forecaster("moving_average", moving_average_window=2), [1, 5, 9]).predict() == 7.0
    with pytest.raises(ValueError, match="unknown load predictor"):
        make_forecaster("lstm")
