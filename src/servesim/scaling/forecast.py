"""Demand forecasters for the planner's throughput scaling (Dynamo's load predictors).

Each forecaster sees one value per throughput interval (the request count, or the mean input or
output length of the interval) and predicts the next one. Shared behaviour, as in Dynamo:

* NaN counts as 0; zeros before the first non-zero value (the idle start of a trace) are
  skipped, so they do not drag the forecast down;
* with ``log1p`` the series is modelled as ``log1p(x)`` and forecasts are mapped back with
  ``expm1``;
* until a forecaster has its minimum number of points it predicts the last value (0 before any);
* forecasts are never negative.

Dynamo's ``arima`` (pmdarima's auto-ARIMA) and ``prophet`` predictors need libraries servesim
does not ship; ``make_forecaster`` maps them to documented substitutes:

* ``arima`` → the local-linear-trend Kalman filter. A local linear trend is the state-space form
  of ARIMA(0,2,2), one of the orders auto-ARIMA picks for trending load; like Dynamo's ARIMA it
  predicts the last value until it has 5 points and a constant series exactly.
* ``prophet`` → an ordinary least-squares line over the last ``window`` points, extrapolated one
  step: Prophet's piecewise-linear trend on a short window without seasonality reduces to it.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

__all__ = [
    "ConstantForecaster",
    "Forecaster",
    "LinearTrendForecaster",
    "LocalLinearTrendForecaster",
    "MovingAverageForecaster",
    "make_forecaster",
]


class Forecaster(Protocol):
    """Predicts the next value of a series seen one point at a time."""

    def observe(self, value: float) -> None:
        """Add the newest point."""

    def predict(self) -> float:
        """The forecast of the next point (>= 0)."""


class _Series:
    """The common front end: NaN → 0, leading zeros skipped, optional log1p transform."""

    def __init__(self, log1p: bool = False, min_points: int = 1) -> None:
        self.log1p = log1p
        self.min_points = min_points
        self.count = 0
        self.last_raw = 0.0
        self._started = False

    def _accept(self, value: float) -> float | None:
        """The transformed point to learn from, or None when it is a leading zero."""
        raw = 0.0 if math.isnan(value) else max(0.0, float(value))
        if raw == 0.0 and not self._started:
            return None
        self._started = True
        self.count += 1
        self.last_raw = raw
        return math.log1p(raw) if self.log1p else raw

    def _back(self, value: float) -> float:
        """A model-space forecast mapped back to the original scale, clipped at 0."""
        return max(0.0, math.expm1(value) if self.log1p else value)

    def _warm(self) -> bool:
        """True once enough points were seen to forecast with the model."""
        return self.count >= self.min_points


class ConstantForecaster(_Series):
    """Next = last value."""

    def observe(self, value: float) -> None:
        """Remember the point."""
        self._accept(value)

    def predict(self) -> float:
        """The last accepted point."""
        return self.last_raw


class MovingAverageForecaster(_Series):
    """Next = mean of the last ``window`` points."""

    def __init__(self, window: int, log1p: bool = False, min_points: int = 1) -> None:
        super().__init__(log1p, min_points)
        self._points: deque[float] = deque(maxlen=max(1, window))

    def observe(self, value: float) -> None:
        """Add the point to the window."""
        point = self._accept(value)
        if point is not None:
            self._points.append(point)

    def predict(self) -> float:
        """The window mean (the last value while warming up)."""
        if not self._warm() or not self._points:
            return self.last_raw
        return self._back(sum(self._points) / len(self._points))


class LinearTrendForecaster(_Series):
    """Next = the least-squares line through the last ``window`` points, one step ahead."""

    def __init__(self, window: int, log1p: bool = False, min_points: int = 5) -> None:
        super().__init__(log1p, min_points)
        self._points: deque[float] = deque(maxlen=max(2, window))

    def observe(self, value: float) -> None:
        """Add the point to the window."""
        point = self._accept(value)
        if point is not None:
            self._points.append(point)

    def predict(self) -> float:
        """The fitted line at the next step (the last value while warming up)."""
        if not self._warm() or len(self._points) < 2:
            return self.last_raw
        n = len(self._points)
        mean_x = (n - 1) / 2.0
        mean_y = sum(self._points) / n
        sxx = sum((i - mean_x) ** 2 for i in range(n))
        sxy = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(self._points))
        slope = sxy / sxx
        return self._back(mean_y + slope * (n - mean_x))


class LocalLinearTrendForecaster(_Series):
    """A Kalman filter on level and trend: level' = level + trend + w, trend' = trend + u.

    The state starts at the first point with zero trend and covariance 1000·I; every later
    point is a predict-then-update step with process noise diag(q_level, q_trend) and
    measurement noise r. The forecast is the one-step-ahead level.
    """

    def __init__(self, q_level: float = 1.0, q_trend: float = 0.1, r: float = 10.0,
                 min_points: int = 5, log1p: bool = False) -> None:
        super().__init__(log1p, min_points)
        self.q_level = max(1e-12, q_level)
        self.q_trend = max(1e-12, q_trend)
        self.r = max(1e-9, r)
        self.level = 0.0
        self.trend = 0.0
        self.cov = [[1000.0, 0.0], [0.0, 1000.0]]

    def observe(self, value: float) -> None:
        """Filter the point in (the first one only initialises the level)."""
        point = self._accept(value)
        if point is None:
            return
        if self.count == 1:
            self.level, self.trend = point, 0.0
            return
        self._predict_step()
        self._update_step(point)

    def predict(self) -> float:
        """The one-step-ahead level (the last value while warming up)."""
        if not self._warm():
            return self.last_raw
        return self._back(self.level + self.trend)

    def _predict_step(self) -> None:
        """x ← F x, P ← F P Fᵀ + Q with F = [[1, 1], [0, 1]]."""
        (a, b), (c, d) = self.cov
        self.level += self.trend
        self.cov = [[a + b + c + d + self.q_level, b + d], [c + d, d + self.q_trend]]

    def _update_step(self, z: float) -> None:
        """Kalman update with H = [1, 0]: K = P Hᵀ / (H P Hᵀ + r), x ← x + K·(z − level),
        P ← (I − K H) P."""
        (a, b), (c, d) = self.cov
        s = a + self.r
        k0, k1 = a / s, c / s
        innovation = z - self.level
        self.level += k0 * innovation
        self.trend += k1 * innovation
        self.cov = [[(1 - k0) * a, (1 - k0) * b], [c - k1 * a, d - k1 * b]]


def make_forecaster(kind: str, *, log1p: bool = False, window: int = 50, moving_average_window: int = 5,
                    q_level: float = 1.0, q_trend: float = 0.1, r: float = 10.0,
                    kalman_min_points: int = 5) -> Forecaster:
    """The forecaster for a `planner.load_predictor` value (see the module notes for the
    arima/prophet substitutes)."""
    if kind == "constant":
        return ConstantForecaster(log1p)
    if kind == "moving_average":
        return MovingAverageForecaster(moving_average_window, log1p)
    if kind == "kalman":
        return LocalLinearTrendForecaster(q_level, q_trend, r, kalman_min_points, log1p)
    if kind == "arima":
        return LocalLinearTrendForecaster(q_level, q_trend, r, 5, log1p)
    if kind == "prophet":
        return LinearTrendForecaster(window, log1p, min_points=5)
    raise ValueError(f"unknown load predictor {kind!r}")
