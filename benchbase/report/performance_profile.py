"""AlgoPerf's performance profile: one score per submitter across workloads.

MLPerf Training reports each benchmark's time alone and never adds benchmarks up. AlgoPerf (the
MLCommons algorithmic-efficiency benchmark) aggregates with a performance profile (Dolan and
Moré's): for a submitter s and a workload w, its time to the workload's target t(s, w) and its
ratio to the fastest submitter on that workload,

    r(s, w) = t(s, w) / min over s' of t(s', w),

where a workload s never reached, or reached more than MAX_TAU times slower than the fastest,
counts as never (infinity). The profile rho_s(tau) is the fraction of the workloads with
r(s, w) <= tau, and the benchmark score is the area under rho_s over tau in [MIN_TAU, MAX_TAU]
divided by the interval's length: 1 for a submitter that is the fastest everywhere, 0 for one that
never comes within MAX_TAU times the fastest.

As AlgoPerf's scoring code does, the area is the trapezoid rule over TAU_POINTS linearly spaced
values of tau from 1 to 4 (its ``compute_performance_profiles(min_tau=1, max_tau=4,
num_points=100, scale="linear")`` and ``compute_leaderboard_score(normalize=True)``). The profile
is a step function, so the trapezoids differ from its exact area (``exact_score``) by at most half
a grid step per workload, under 0.6% of the score's range.

Pure functions over plain numbers: which runs make a submitter and a time lives in
benchbase.report.profile_table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["MAX_TAU", "MIN_TAU", "TAU_POINTS", "benchmark_score", "counted_ratio", "exact_score",
           "performance_ratios", "profile_steps", "rho", "tau_grid"]

MIN_TAU = 1.0
MAX_TAU = 4.0
"""A submitter more than 4 times slower than the fastest on a workload counts as never reaching it
(AlgoPerf's bound)."""
TAU_POINTS = 100
"""AlgoPerf's grid: 100 linearly spaced values of tau."""


def performance_ratios(times: Mapping[str, Mapping[str, float | None]]) -> dict[str, dict[str, float | None]]:
    """times[submitter][workload] (seconds; None or absent: never reached) -> ratio[submitter][workload]
    to the fastest submitter's time on that workload; None where the submitter never reached it.

    The workloads are those any submitter has a time (or None) for; the ratio is not yet bounded
    by MAX_TAU (``counted_ratio`` does that), so a table can show how far beyond it a time is."""
    workloads = list(dict.fromkeys(workload for row in times.values() for workload in row))
    fastest = {workload: min((row[workload] for row in times.values() if row.get(workload) is not None),
                             default=None) for workload in workloads}
    return {submitter: {workload: _ratio(row.get(workload), fastest[workload]) for workload in workloads}
            for submitter, row in times.items()}


def _ratio(seconds: float | None, fastest: float | None) -> float | None:
    if seconds is None or fastest is None:
        return None
    if fastest <= 0:  # reached at the clock's start: only an equal time is as fast
        return 1.0 if seconds <= fastest else math.inf
    return seconds / fastest


def counted_ratio(ratio: float | None, max_tau: float = MAX_TAU) -> float:
    """The ratio as the profile counts it: never reached, or beyond max_tau, is infinity."""
    return math.inf if ratio is None or ratio > max_tau else ratio


def rho(ratios: Sequence[float | None], tau: float, max_tau: float = MAX_TAU) -> float:
    """The fraction of the workloads (one ratio each) with a counted ratio at or below tau."""
    if not ratios:
        return 0.0
    return sum(counted_ratio(ratio, max_tau) <= tau for ratio in ratios) / len(ratios)


def tau_grid(points: int = TAU_POINTS, min_tau: float = MIN_TAU, max_tau: float = MAX_TAU) -> list[float]:
    """``points`` linearly spaced values from min_tau to max_tau, both included."""
    step = (max_tau - min_tau) / (points - 1)
    return [min_tau + index * step for index in range(points - 1)] + [max_tau]


def benchmark_score(ratios: Sequence[float | None], points: int = TAU_POINTS, max_tau: float = MAX_TAU) -> float:
    """AlgoPerf's score: the trapezoid-rule area under rho over the grid, divided by max_tau - MIN_TAU."""
    grid = tau_grid(points, MIN_TAU, max_tau)
    heights = [rho(ratios, tau, max_tau) for tau in grid]
    area = sum((right - left) * (low + high) / 2
               for left, right, low, high in zip(grid, grid[1:], heights, heights[1:], strict=False))
    return area / (max_tau - MIN_TAU)


def exact_score(ratios: Sequence[float | None], max_tau: float = MAX_TAU) -> float:
    """The exact area under the step function rho, divided by max_tau - MIN_TAU: a workload at
    ratio r counts from tau = r on, so it adds (max_tau - r) / (max_tau - MIN_TAU) / workloads."""
    if not ratios:
        return 0.0
    span = max_tau - MIN_TAU
    return sum((max_tau - max(MIN_TAU, counted)) / span for ratio in ratios
               if math.isfinite(counted := counted_ratio(ratio, max_tau))) / len(ratios)


def profile_steps(ratios: Sequence[float | None], max_tau: float = MAX_TAU) -> tuple[list[float], list[float]]:
    """(tau, rho) at MIN_TAU, at each counted ratio and at max_tau: the corners of the step plot
    (drawn with steps after each point), exact where the grid would round them."""
    corners = sorted({MIN_TAU, max_tau, *(max(MIN_TAU, counted) for ratio in ratios
                                         if math.isfinite(counted := counted_ratio(ratio, max_tau)))})
    return corners, [rho(ratios, tau, max_tau) for tau in corners]
