"""Time-to-accuracy: TTA(a, e) is the run-clock time at the end of the first evaluation at
which the median of the last e evaluations of the target's metric is at or below a."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from benchbase.specs import Target, TTARule
from benchbase.specs.tta import METRICS

__all__ = ["TargetTracker"]


class TargetTracker:
    """Feeds evaluations of the scored subset in order and remembers when each target was first reached."""

    def __init__(self, rule: TTARule, history: Mapping[str, list[float]] | None = None,
                 reached: Mapping[str, float] | None = None, reached_epoch: Mapping[str, int] | None = None) -> None:
        """A fresh tracker, or (``history``, ``reached``, ``reached_epoch``) one going on from a resumed run's state."""
        self.rule = rule
        self.history: dict[str, list[float]] = {metric: list((history or {}).get(metric, [])) for metric in METRICS}
        self.reached: dict[str, float] = dict(reached or {})
        """Target label -> run-clock seconds at which it was reached."""
        self.reached_epoch: dict[str, int] = dict(reached_epoch or {})

    def update(self, epoch: int, seconds: float, rates: Mapping[str, float]) -> list[Target]:
        """Record one evaluation's rates (wer, cer, paper_cer); returns the targets it newly reached.

        A metric the evaluation lacks (an old log without paper_cer) stays unrecorded, so no
        target stated in it is reached.
        """
        for metric, values in self.history.items():
            if metric in rates:
                values.append(float(rates[metric]))
        newly = [target for target in self.rule.targets if target.label not in self.reached and self._met(target)]
        for target in newly:
            self.reached[target.label] = seconds
            self.reached_epoch[target.label] = epoch
        return newly

    def aggregate(self, metric: str) -> float | None:
        """Median of the last e evaluations, or None before there are e of them."""
        values = self.history[metric]
        if len(values) < self.rule.window:
            return None
        return statistics.median(values[-self.rule.window :])

    def _met(self, target: Target) -> bool:
        value = self.aggregate(target.metric)
        return value is not None and value <= target.value

    @property
    def all_reached(self) -> bool:
        return len(self.reached) == len(self.rule.targets)
