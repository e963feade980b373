"""MLPerf's reference convergence point (RCP) rule, on numbers alone: epochs to converge in, a verdict out.

A time-to-accuracy score rewards converging in fewer epochs as much as computing faster, so a
submission could "win" by a lucky seed or an optimizer that only looks like the reference. MLPerf
guards against that with RCPs: the reference implementation is trained 2N times at a global batch
size, and a set of N submission runs must not converge in significantly fewer epochs than those
references did. This module is mlperf_logging's rcp_checker (rcp_checker.py, training rules 1.0 and
later) computed the same way, number for number, for one target at a time:

- a reference point per batch size: RCP mean = the olympic mean of the 2N references' epochs (one
  dropped at each end), RCP stdev = their population standard deviation (numpy's np.std), min
  epochs = the smallest mean a submission may have before a one-sided two-sample t-test (alpha 0.05)
  says it converges faster than the reference, found by bisection to a tolerance of 1e-4 epochs;
  max speedup = mean / min epochs;
- points whose mean is slower than the interpolation of their neighbours are pruned, and a batch
  size between two remaining points gets an interpolated point;
- a submission set: a run that never converged counts as infinitely many epochs; more than one is
  insufficient convergence; the set passes when its olympic mean is at least RCP mean / max speedup,
  and a set faster than the RCP mean but within that bound has its score normalized by
  RCP mean / its mean (the norm factor, at least 1).

benchbase applies it per target (one RCP per workload, global batch size and target), and a set
with another number of runs than the RCP requires is a verdict that says so, never a pass (the
official RCP checker leaves counting runs to the package checker).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

__all__ = ["ALPHA", "DROPPED_AT_EACH_END", "TOLERANCE", "Case", "ReferencePoint", "Verdict", "interpolated_point",
           "judge", "min_acceptable_mean", "olympic_mean", "prune", "reference_point"]

ALPHA = 0.05
"""The t-test's significance level (RCP_Checker.alpha)."""
TOLERANCE = 1e-4
"""The bisection of min epochs stops when its interval is this narrow, in epochs (RCP_Checker.tolerance)."""
DROPPED_AT_EACH_END = 1
"""The olympic mean drops this many runs at each end, of the references and of a submission set alike."""


class Case(StrEnum):
    """How a verdict was reached: check_directory's cases, and the two that stop a set before any RCP."""

    FOUND = "RCP found"
    INTERPOLATED = "RCP interpolated"
    SLOWER_AT_SMALLER_BATCH = "RCP missing, slower at a smaller batch"
    """No RCP at or below the set's batch, but the set converges no faster than the smallest batch's RCP
    allows; a smaller batch rarely needs fewer epochs, so it passes."""
    MISSING = "RCP missing"
    INSUFFICIENT_CONVERGENCE = "insufficient convergence"
    WRONG_RUN_COUNT = "wrong number of runs"


@dataclass(frozen=True)
class ReferencePoint:
    """One RCP: the reference's convergence at one global batch size, for one target."""

    batch: int
    mean: float
    """The olympic mean of the references' epochs (RCP Mean)."""
    stdev: float
    """The population standard deviation of every reference's epochs (RCP Stdev)."""
    min_epochs: float
    """The smallest olympic mean a submission set may have (Min Epochs)."""
    runs: int
    """Reference runs behind it; 0 for an interpolated point."""
    between: tuple[int, int] | None = None
    """The batch sizes an interpolated point was interpolated between."""

    @property
    def max_speedup(self) -> float:
        """mean / min epochs (Max Speedup): how much faster than the reference mean a set may converge."""
        return self.mean / self.min_epochs

    @property
    def allowed(self) -> float:
        """The bound a set's olympic mean must reach, as the official checker computes it (mean / max speedup)."""
        return self.mean / self.max_speedup


@dataclass(frozen=True)
class Verdict:
    """The rule's answer for one set of runs and one target, with every number it was decided on."""

    target: str
    batch: int
    passed: bool
    case: Case
    epochs: tuple[int | None, ...]
    """Each run's epochs to the target; None where it never reached it (counted as infinitely many)."""
    explanation: str
    """One sentence with the numbers, for a person."""
    point: ReferencePoint | None = None
    """The RCP the set was measured against (None when none was, see ``case``)."""
    submission_mean: float | None = None
    """The set's olympic mean of epochs."""
    norm_factor: float = 1.0
    """RCP mean / the set's mean, at least 1: what a score that passed is normalized by (MLPerf's
    scaling.json) when the set converged faster than the reference mean."""

    @property
    def rcp_mean(self) -> float | None:
        return None if self.point is None else self.point.mean

    @property
    def rcp_stdev(self) -> float | None:
        return None if self.point is None else self.point.stdev

    @property
    def min_epochs(self) -> float | None:
        return None if self.point is None else self.point.min_epochs

    @property
    def max_speedup(self) -> float | None:
        return None if self.point is None else self.point.max_speedup


def olympic_mean(values: Sequence[float]) -> float:
    """The mean of the sorted values without DROPPED_AT_EACH_END at each end."""
    ordered = sorted(values)
    return float(np.mean(ordered[DROPPED_AT_EACH_END:len(ordered) - DROPPED_AT_EACH_END]))


def _one_sided_p(mean1: float, stdev1: float, samples1: int, mean2: float, stdev2: float, samples2: int) -> float:
    """P(first mean >= second mean) under a pooled-variance two-sample t-test (RCP_Checker._find_p_value)."""
    # scipy.stats costs most of a second to import; only the rule's arithmetic needs it, not every command.
    from scipy.stats import ttest_ind_from_stats

    t_stat, p_value = ttest_ind_from_stats(mean1, stdev1, samples1, mean2, stdev2, samples2, equal_var=True)
    return float(p_value / 2 if t_stat < 0 else 1 - p_value / 2)


def min_acceptable_mean(mean: float, stdev: float, reference_samples: int, submission_runs: int) -> float:
    """The smallest mean of epochs that a one-sided t-test at ALPHA cannot tell from ``mean``: a bisection
    between 0 and ``mean`` (anything above the reference mean is acceptable).

    As in RCP_Checker._find_min_acceptable_mean, the sample counts sit the other way round from their
    names: the candidate mean is tested with ``reference_samples`` and the reference mean with the
    submission's kept runs (``submission_runs`` - 2). Mirrored, so that the bounds are MLPerf's."""
    if stdev == 0:
        return mean
    submission_samples = submission_runs - 2 * DROPPED_AT_EACH_END
    high, low = mean, 0.0
    middle = (low + high) / 2
    while high - low > TOLERANCE:
        if _one_sided_p(middle, stdev, reference_samples, mean, stdev, submission_samples) > ALPHA:
            high = middle
        else:
            low = middle
        middle = (low + high) / 2
    return middle


def reference_point(batch: int, epochs: Sequence[float], submission_runs: int) -> ReferencePoint:
    """The RCP of the references' ``epochs`` at ``batch`` (RCP_Checker.compute_rcp_stats)."""
    if len(epochs) <= 2 * DROPPED_AT_EACH_END:
        raise ValueError(f"batch {batch}: {len(epochs)} reference runs leave none after the olympic drop")
    ordered = sorted(float(value) for value in epochs)
    mean, stdev = olympic_mean(ordered), float(np.std(ordered))
    min_epochs = min_acceptable_mean(mean, stdev, len(ordered) - 2 * DROPPED_AT_EACH_END, submission_runs)
    return ReferencePoint(batch, mean, stdev, min_epochs, len(ordered))


def interpolated_point(batch: int, low: ReferencePoint, high: ReferencePoint, submission_runs: int) -> ReferencePoint:
    """An RCP at ``batch`` between two others: mean and stdev interpolated linearly in the batch size, min
    epochs computed with 2 x ``submission_runs`` reference samples (RCP_Checker._create_interp_rcp)."""
    mean = float(np.interp(batch, [low.batch, high.batch], [low.mean, high.mean]))
    stdev = float(np.interp(batch, [low.batch, high.batch], [low.stdev, high.stdev]))
    min_epochs = min_acceptable_mean(mean, stdev, submission_runs * 2, submission_runs)
    return ReferencePoint(batch, mean, stdev, min_epochs, 0, (low.batch, high.batch))


def prune(points: Sequence[ReferencePoint], submission_runs: int) -> list[ReferencePoint]:
    """The points the rule measures against (RCP_Checker._prune_rcps): none below the batch size that
    converges in the fewest epochs, and none slower than the interpolation of its two neighbours, so
    that a submission is never held to a reference that converged worse than its batch size needs."""
    if not points:
        return []
    kept = sorted(points, key=lambda point: point.batch)
    fastest = min(kept, key=lambda point: point.mean)
    kept = [point for point in kept if point.batch >= fastest.batch]
    index = 1
    while index < len(kept) - 1:
        between = interpolated_point(kept[index].batch, kept[index - 1], kept[index + 1], submission_runs)
        if kept[index].mean > between.mean:
            del kept[index]
            index -= 1
        index += 1
    return kept


def judge(points: Sequence[ReferencePoint], batch: int, epochs: Sequence[int | None], submission_runs: int,
          target: str) -> Verdict:
    """The verdict on a set of runs at ``batch`` whose epochs to ``target`` are ``epochs`` (None: never
    reached), against the RCPs of every batch size (pruned here, as the official checker's default
    pass does); check_directory's case table."""
    epochs = tuple(epochs)
    verdict = _Sentences(target, batch, epochs)
    if len(epochs) != submission_runs:
        return verdict.unjudged(Case.WRONG_RUN_COUNT, f"{len(epochs)} run(s) at batch {batch}, but the RCP needs "
                                f"exactly {submission_runs} (its reference has {2 * submission_runs})")
    missed = sum(value is None for value in epochs)
    if missed > DROPPED_AT_EACH_END:
        return verdict.unjudged(Case.INSUFFICIENT_CONVERGENCE, f"{missed} of {len(epochs)} runs never reached "
                                f"{target}: insufficient convergence (the rule tolerates {DROPPED_AT_EACH_END})")
    pruned = prune(points, submission_runs)
    exact = next((point for point in pruned if point.batch == batch), None)
    below = max((point for point in pruned if point.batch < batch), key=lambda point: point.batch, default=None)
    above = min((point for point in pruned if point.batch > batch), key=lambda point: point.batch, default=None)
    if exact is not None:
        return verdict.measured(exact, Case.FOUND)
    if below is not None and above is not None:
        return verdict.measured(interpolated_point(batch, below, above, submission_runs), Case.INTERPOLATED)
    if below is None and above is not None:
        smallest = pruned[0]
        measured = verdict.measured(smallest, Case.SLOWER_AT_SMALLER_BATCH)
        if measured.passed:
            return measured
        return verdict.missing(f"no RCP at batch {batch}, and the set converges faster than the smallest batch's "
                               f"RCP ({smallest.batch}) allows: {measured.explanation}; an RCP at batch {batch} is "
                               "needed")
    if below is not None:
        return verdict.missing(f"no RCP at batch {batch} or above (the largest is {below.batch}): an RCP at batch "
                               f"{batch} is needed")
    return verdict.missing(f"no RCP for {target} at any batch size")


@dataclass(frozen=True)
class _Sentences:
    """Builds a target's verdicts and the sentence each one says."""

    target: str
    batch: int
    epochs: tuple[int | None, ...]

    def unjudged(self, case: Case, explanation: str) -> Verdict:
        return Verdict(self.target, self.batch, False, case, self.epochs, explanation)

    def missing(self, explanation: str) -> Verdict:
        return self.unjudged(Case.MISSING, explanation)

    def measured(self, point: ReferencePoint, case: Case) -> Verdict:
        """RCP_Checker._eval_submission_record: the set's olympic mean against the point's bound."""
        mean = olympic_mean([math.inf if value is None else float(value) for value in self.epochs])
        norm = max(1.0, point.mean / mean)
        passed = mean >= point.allowed
        runs = f"the {len(self.epochs)} runs' olympic mean of {mean:.2f} epochs to {self.target}"
        rcp = self._describe(point)
        if not passed:
            sentence = (f"{runs} is below the {point.allowed:.2f} that the RCP allows ({rcp}): converges faster "
                        "than the reference")
        elif mean < point.mean:
            sentence = (f"{runs} is faster than the RCP mean but within the {point.allowed:.2f} it allows ({rcp}): "
                        f"the score is normalized by {point.mean:.2f} / {mean:.2f} = {norm:.3f}")
        else:
            sentence = f"{runs} is at or above the RCP mean ({rcp}): converges like the reference"
        return Verdict(self.target, self.batch, passed, case, self.epochs, sentence, point, mean, norm)

    def _describe(self, point: ReferencePoint) -> str:
        if point.between is not None:
            low, high = point.between
            return f"mean {point.mean:.2f}, interpolated at batch {point.batch} between {low} and {high}"
        where = f" at batch {point.batch}" if point.batch != self.batch else ""
        return f"mean {point.mean:.2f}, {point.runs} reference runs{where}"
