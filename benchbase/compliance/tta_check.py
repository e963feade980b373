"""Recomputing time-to-accuracy from a compliance log, to catch a result.json that claims
anything else.

Only the evaluations of the subset the TTA rule names count (eval_accuracy's ``subset``
metadata); a log written before subsets existed has none, and all its evaluations count.

An evaluation's time is its eval_stop (the harness reads its clock right after logging
eval_stop) minus run_start, from the log's time_ms, less the downtime of a resumed run
(ParsedLog.run_clock); eval_accuracy's own time stands in when eval_stop is missing. The
harness measures TTA with perf_counter while time_ms is wall-clock milliseconds, so the
two agree only to within a tolerance the rule set states.
"""

from __future__ import annotations

from pydantic import ValidationError

from benchbase.compliance.evidence import Evidence
from benchbase.compliance.keys import SUBSET, constants
from benchbase.compliance.parse import LogEvent, ParsedLog
from benchbase.metrics import TargetTracker
from benchbase.specs import TargetReached, TTARule
from benchbase.specs.numbers import is_number
from benchbase.specs.overrides import MISSING, field_at

__all__ = ["recompute_tta", "recompute_tta_messages"]


def recompute_tta(log: ParsedLog, rule: TTARule, subset: str | None = None) -> dict[str, tuple[float, int] | None]:
    """Target label -> (run-clock seconds, epoch) when the log's evaluations of ``subset`` reach it, else None."""
    run_start = log.first(constants.RUN_START)
    tracker = TargetTracker(rule)
    if run_start is None:
        return {target.label: None for target in rule.targets}
    for event, finished_ms in _evaluations(log, subset):
        rates = {metric: rate for metric, rate in event.value.items() if is_number(rate)}
        tracker.update(event.epoch() or 0, log.run_clock(finished_ms) or 0.0, rates)
    return {target.label: (tracker.reached[target.label], tracker.reached_epoch[target.label])
            if target.label in tracker.reached else None for target in rule.targets}


def recompute_tta_messages(evidence: Evidence, tolerance_seconds: float,
                           tolerance_fraction: float) -> list[str] | None:
    """Failure messages, or None when no TTA rule is known for the run."""
    if evidence.result is None:
        return ["no result.json to compare with"]
    claimed = evidence.result.tta
    found = _tta_rule(evidence)
    if found is None:
        return None
    rule, subset = found
    labels = [target.label for target in rule.targets]
    if sorted(claimed) != sorted(labels):
        return [f"result.json reports targets {sorted(claimed)}, but the run's TTA rule has {sorted(labels)}"]
    recomputed = recompute_tta(evidence.log, rule, subset)
    messages = []
    for label in labels:
        message = _compare(label, claimed[label], recomputed[label], tolerance_seconds, tolerance_fraction)
        if message:
            messages.append(message)
    return messages


def _compare(label: str, claim: TargetReached | None, actual: tuple[float, int] | None, tolerance_seconds: float,
             tolerance_fraction: float) -> str | None:
    if actual is None:
        if claim is None:
            return None
        return (f"result.json claims {label} at {claim['seconds']} s, but the log's evaluations never reach it "
                "(tampered)")
    seconds, epoch = actual
    if claim is None:
        return f"result.json says {label} was never reached, but the log reaches it at {seconds:.3f} s (epoch {epoch})"
    # RunResult has checked that the claim's seconds are a finite number and its epoch an integer.
    allowed = max(tolerance_seconds, tolerance_fraction * seconds)
    if abs(claim["seconds"] - seconds) > allowed:
        return (f"result.json claims {label} at {claim['seconds']:.3f} s, but the log's evaluations reach it at "
                f"{seconds:.3f} s (epoch {epoch}; tolerance {allowed:.3f} s; tampered TTA)")
    if claim["epoch"] != epoch:
        return f"result.json claims {label} at epoch {claim['epoch']!r}, the log reaches it at epoch {epoch}"
    return None


def _evaluations(log: ParsedLog, subset: str | None) -> list[tuple[LogEvent, float]]:
    """Each well-formed eval_accuracy of ``subset`` with the time its evaluation finished."""
    subsets_logged = any(SUBSET in event.metadata for event in log.keyed(constants.EVAL_ACCURACY))
    found = []
    # One pass from the end: each event's next eval_stop, without rescanning the log per evaluation.
    next_stop: list[LogEvent | None] = [None] * len(log.events)
    upcoming: LogEvent | None = None
    for index in range(len(log.events) - 1, -1, -1):
        next_stop[index] = upcoming
        if log.events[index].key == constants.EVAL_STOP:
            upcoming = log.events[index]
    for index, event in enumerate(log.events):
        value = event.value
        if event.key != constants.EVAL_ACCURACY or not isinstance(value, dict):
            continue
        if subsets_logged and event.metadata.get(SUBSET) != subset:
            continue
        if not (is_number(value.get("wer")) and is_number(value.get("cer"))):
            continue
        stop = next_stop[index]
        epoch = event.metadata.get(constants.EPOCH_NUM)
        same_epoch = stop is not None and stop.metadata.get(constants.EPOCH_NUM) == epoch
        found.append((event, stop.time_ms if same_epoch else event.time_ms))
    return found


def _tta_rule(evidence: Evidence) -> tuple[TTARule, str | None] | None:
    """The run's TTA rule and the dev subset it is scored on."""
    # The run's own targets (config.json) count: --target may replace the workload's. The
    # window and subset are pinned, and fixed_hyperparameters checks config.json's against the workload's.
    for workload in ((evidence.config or {}).get("workload"), evidence.workload):
        source = field_at(workload, "tta")
        if source is not None and source is not MISSING:
            try:
                rule = TTARule.model_validate(source)
            except ValidationError:
                continue
            return rule, rule.subset or _first_dev_subset(workload)
    return None


def _first_dev_subset(workload: dict) -> str | None:
    dev = field_at(workload, "data.dev")
    return dev[0] if isinstance(dev, list | tuple) and dev and isinstance(dev[0], str) else None
