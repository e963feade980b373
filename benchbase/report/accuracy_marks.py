"""Figure 7's reading of the eval records: each subset's values, the TTA rule's running
aggregate, and a mark where each run reached each target.

A target is reached at the end of the first evaluation at which the median of the last e
evaluations of the scored subset is at or below it, so the mark usually sits an evaluation or
two after the curve first crosses the target line. The figure draws that median too, so the
reader sees the mark where the median, not the curve, crosses.
"""

from __future__ import annotations

from pydantic import ValidationError

from benchbase.metrics.tta import TargetTracker
from benchbase.report.figure_parts import movable
from benchbase.report.runs import Run, RunGroup
from benchbase.specs import TTARule
from benchbase.specs.tta import METRIC_LABELS, METRICS

__all__ = ["CER_METRICS", "TargetMarks", "eval_value", "metric_name", "subset_series", "targets"]

CER_METRICS = ("cer", "paper_cer")
SAME_EVALUATION_SECONDS = 0.01  # result.json's TTA is the eval record's time, both rounded to 4 decimals


def eval_value(record: dict, metric: str, subset: str | None = None) -> float | None:
    """The value of metric on subset, or on the scored subset when None: top level in every record
    format; new records also nest every subset's under "subsets"."""
    nested = record.get("subsets") or {}
    if subset is not None:
        return (nested.get(subset) or {}).get(metric)
    value = record.get(metric)
    return value if value is not None else (nested.get(record.get("subset")) or {}).get(metric)


def subset_series(evaluations: list[dict]) -> list[tuple[str | None, bool]]:
    """(subset, scored) for each subset the records hold: the scored one first (None where old
    records name none), then the others (dev-other) in the order the records list them."""
    if not evaluations:
        return []
    scored = evaluations[0].get("subset")
    others = dict.fromkeys(name for record in evaluations for name in record.get("subsets") or {} if name != scored)
    return [(scored, True), *((name, False) for name in others)]


def metric_name(metric: str) -> str:
    # The names the TTA tables use (paper_cer is "CER", jiwer's cer "CER/ref"), so figure and table agree.
    return METRIC_LABELS.get(metric, metric.upper())


def targets(groups: list[RunGroup]) -> list[tuple[str, float]]:
    """Every group's (metric, value) targets, sorted."""
    found = {(str(target.get("metric")), float(target["value"])) for group in groups
             for target in (group.workload.get("tta") or {}).get("targets", [])
             if isinstance(target, dict) and isinstance(target.get("value"), int | float)}
    return sorted(found)


class TargetMarks:
    """Draws, for one group's runs, the TTA rule's running median and a star at each TTA.

    panels maps a metric to the axis that plots it; a target in a metric no panel plots is left out.
    """

    def __init__(self, group: RunGroup, panels: dict) -> None:
        self.panels = panels
        self.rule = _rule(group)
        self.window = self.rule.window if self.rule else None
        self.targets = {f"{metric_name(metric)} {value:g}": (metric, value) for metric, value in targets([group])}
        """Target label (as result.json's tta names it) -> (metric, value)."""

    def draw(self, run: Run, color: str, label: str | None) -> None:
        aggregates = self._aggregates(run.evaluations)
        for metric, axis in self.panels.items():
            points = [(record.get("t", 0.0) / 60, value) for record, value in
                      zip(run.evaluations, aggregates.get(metric, ()), strict=False) if value is not None]
            if points:
                axis.plot(*zip(*points, strict=True), ":", color=color, lw=1.6,
                          label=label and f"{label}: median of the last {self.window}")
        self._stars(run, aggregates, color, label)

    def _aggregates(self, evaluations: list[dict]) -> dict[str, list[float | None]]:
        """Metric -> the rule's aggregate after each evaluation (None before there are e of them)."""
        if self.rule is None:
            return {}
        tracker, aggregates = TargetTracker(self.rule), {metric: [] for metric in self.panels}
        for record in evaluations:
            rates = {metric: value for metric in METRICS if (value := eval_value(record, metric)) is not None}
            tracker.update(int(record.get("epoch") or 0), float(record.get("t") or 0.0), rates)
            for metric, values in aggregates.items():
                values.append(tracker.aggregate(metric))
        return aggregates

    def _stars(self, run: Run, aggregates: dict, color: str, label: str | None) -> None:
        labelled = set()  # one legend entry per group in each panel
        for target, reached in run.result.tta.items():
            metric, value = self.targets.get(target, (None, None))
            axis = self.panels.get(metric)
            if axis is None or not isinstance(reached, dict):
                continue
            at = float(reached["seconds"]) / 60
            height = _height(run.evaluations, aggregates.get(metric, []), metric, at * 60) or value
            first = label is not None and id(axis) not in labelled
            axis.plot([at], [height], "*", color=color, ms=12, mec="black", mew=0.6,
                      label=f"{label}: TTA reached" if first else None)
            labelled.add(id(axis))
            # A white ground: the label often lands across a target's dashed line.
            # Movable: separate_labels moves it off the labels of runs that reached a target close by.
            movable(axis.annotate(f"{target}: {at:.2f} min", (at, height), xytext=(6, -11), textcoords="offset points",
                                  fontsize=7, color=color, bbox={"boxstyle": "square,pad=0.1", "facecolor": "white",
                                                    "edgecolor": "none", "alpha": 0.8}))


def _height(evaluations: list[dict], aggregates: list, metric: str, seconds: float) -> float | None:
    """Where the star goes: on the median the rule compared (which crossed the target there), else on
    the evaluation's own value; None when no record has the TTA's time."""
    for index, record in enumerate(evaluations):
        if abs(float(record.get("t") or 0.0) - seconds) <= SAME_EVALUATION_SECONDS:
            median = aggregates[index] if index < len(aggregates) else None
            return median if median is not None else eval_value(record, metric)
    return None


def _rule(group: RunGroup) -> TTARule | None:
    # Old config.json files may predate fields the rule now requires; they get marks but no running median.
    try:
        return TTARule.model_validate(group.workload.get("tta") or {})
    except ValidationError:
        return None
