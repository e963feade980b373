"""The MLPerf score over repeated runs: the olympic mean of time-to-accuracy.

Drop the fastest and the slowest run and average the rest. A run that never reached the
target counts as slower than every run that did, so one such run may be the dropped slowest;
two or more make the score invalid. With fewer than three runs nothing can be dropped, so the
score is the plain mean, and every run must have reached the target.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchbase.report.runs import RunGroup

__all__ = ["OLYMPIC_MINIMUM_RUNS", "SPREAD_MINIMUM_RUNS", "OlympicScore", "olympic_score", "score_group"]

OLYMPIC_MINIMUM_RUNS = 3
SPREAD_MINIMUM_RUNS = 4
"""Runs for a spread (stdev, coefficient of variation): the olympic mean keeps all but two, and a
spread needs two kept values; 5 where one run may miss the target."""


@dataclass(frozen=True)
class OlympicScore:
    runs: int
    converged: int
    seconds: float | None
    """The score; None when invalid."""
    kept: tuple[float, ...]
    note: str
    fastest: float | None = None
    slowest: float | None = None
    """Slowest run that reached the target."""
    stdev: float | None = None
    """Sample standard deviation of the kept runs (None with fewer than two)."""

    @property
    def valid(self) -> bool:
        return self.seconds is not None

    @property
    def minutes(self) -> float | None:
        return None if self.seconds is None else self.seconds / 60

    @property
    def coefficient_of_variation(self) -> float | None:
        """stdev / mean of the kept runs: the spread of a TTA relative to itself (DAWNBench's and
        MLPerf's measure of a benchmark's run-to-run noise); None with fewer than two kept runs."""
        return None if self.stdev is None or not self.seconds else self.stdev / self.seconds


def olympic_score(times: Sequence[float | None]) -> OlympicScore:
    """Score seconds-to-target of N runs (None: the run never reached the target)."""
    reached = sorted(time for time in times if time is not None)
    missed = len(times) - len(reached)
    spread = {"fastest": reached[0] if reached else None, "slowest": reached[-1] if reached else None}
    if not times:
        return OlympicScore(0, 0, None, (), "no runs", **spread)
    if missed > (1 if len(times) >= OLYMPIC_MINIMUM_RUNS else 0):
        return OlympicScore(len(times), len(reached), None, (), f"{missed} of {len(times)} runs never reached it",
                            **spread)
    kept, note = _kept(reached, missed, len(times))
    stdev = statistics.stdev(kept) if len(kept) > 1 else None
    return OlympicScore(len(times), len(reached), statistics.fmean(kept), tuple(kept), note, stdev=stdev, **spread)


def _kept(reached: list[float], missed: int, runs: int) -> tuple[list[float], str]:
    if runs < OLYMPIC_MINIMUM_RUNS:
        return reached, (f"mean of {runs} run(s); the olympic score needs {OLYMPIC_MINIMUM_RUNS}, a spread "
                         f"{SPREAD_MINIMUM_RUNS} (5 if one may miss)")
    kept = reached[1:] if missed else reached[1:-1]
    note = ("dropped the fastest and the one run that never reached it" if missed
            else "dropped the fastest and the slowest")
    if len(kept) < 2:
        note += f"; no spread from {len(kept)} kept run: it needs {SPREAD_MINIMUM_RUNS} runs (5 if one may miss)"
    return kept, note


def score_group(group: RunGroup) -> dict[str, OlympicScore]:
    """Target label -> the olympic score of the group's runs."""
    return {label: olympic_score([run.tta_seconds(label) for run in group.runs]) for label in group.targets}
