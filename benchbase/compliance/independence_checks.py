"""The checks that a run's score was re-checked without trusting its backend.

independent_scoring: after every evaluation (and the final one), benchbase's reference model
re-scored a sample of the scored subset from the weights the backend exported and found that
predict() agreed (benchbase.harness.independent_scoring). This check holds the log to it: an
evaluation without its independent score, a sample smaller than the workload asks for, a
disagreement, a run stopped for one, or exported weights that are not the file the log names
fail the run. It judges what the harness recorded; `benchbase verify` re-scores the exported
weights itself.
"""

from __future__ import annotations

import hashlib

from benchbase.compliance import keys
from benchbase.compliance import rules as r
from benchbase.compliance.check_registry import check
from benchbase.compliance.evidence import Evidence, Skip
from benchbase.compliance.keys import StopReason, constants
from benchbase.compliance.parse import LogEvent
from benchbase.specs.overrides import field_at

__all__ = ["independent_scoring", "optimizer_replay"]


@check(r.IndependentScoringRule)
def independent_scoring(rule: r.IndependentScoringRule, evidence: Evidence) -> list[str]:
    if evidence.is_open() and evidence.config is None:
        raise Skip("an open run may turn independent scoring off, and its own workload is in config.json, "
                   "which a bare log lacks")
    workload, source = evidence.reference_workload()
    subset = field_at(workload, "tta.subset") or (field_at(workload, "data.dev") or [None])[0]
    per_evaluation = field_at(workload, "evaluation.independent_utterances")
    if per_evaluation == 0:
        return []  # turned off, which only an open run can do: a closed one is held to the registered workload
    per_evaluation = per_evaluation if isinstance(per_evaluation, int) else 1  # a spec older than the field
    at_final = field_at(workload, "evaluation.independent_final_utterances")
    log = evidence.log
    scores = log.keyed(keys.INDEPENDENT_SCORE)
    periodic = {event.epoch(): event for event in scores if not event.metadata.get(keys.FINAL)}
    messages = []
    for evaluation in log.keyed(constants.EVAL_ACCURACY):
        if evaluation.metadata.get(keys.SUBSET) != subset:
            continue
        score = periodic.get(evaluation.epoch())
        if score is None:
            messages.append(f"line {evaluation.line}: the evaluation of epoch {evaluation.epoch()} has no independent "
                            "score")
            continue
        messages += _judged(score, min(per_evaluation, _utterances(evaluation)), source)
    finals = [event for event in log.keyed(keys.FINAL_ACCURACY) if event.metadata.get(keys.SUBSET) == subset]
    if finals:
        final_scores = [event for event in scores if event.metadata.get(keys.FINAL)]
        if not final_scores:
            messages.append(f"line {finals[-1].line}: the final evaluation of {subset} has no independent score")
        else:
            size = _utterances(finals[-1])
            messages += _judged(final_scores[-1], size if at_final is None else min(at_final, size), source)
    stop = log.first(constants.RUN_STOP)
    if stop is not None and stop.metadata.get(keys.STOP_REASON) == StopReason.PREDICTION_MISMATCH:
        error = stop.metadata.get(keys.ERROR, "predict() disagreed with the exported weights")
        messages.append(f"line {stop.line}: the run stopped because {error}")
    return messages + _exported_weights(evidence)


@check(r.OptimizerReplayRule)
def optimizer_replay(rule: r.OptimizerReplayRule, evidence: Evidence) -> list[str]:
    """The first step's replay (benchbase.harness.optimizer_replay) is on the record and agreed, or
    was skipped for a reason the replay states; a resumed segment's log carries its first one."""
    log = evidence.log
    if log.first(constants.RUN_START) is None:
        return []
    replays = log.keyed(keys.OPTIMIZER_REPLAY)
    if not replays:
        return ["the log has no benchbase_optimizer_replay: the run's first step was not replayed with the "
                "workload's optimizer"]
    value = replays[0].value if isinstance(replays[0].value, dict) else {}
    where = f"line {replays[0].line}"
    if "skipped" in value:
        skipped = str(value["skipped"])
        # Weights the reference cannot read: an open run's own model may (independent scoring is off there too).
        accepted = skipped in keys.REPLAY_SKIP_REASONS or (skipped.startswith(keys.REPLAY_NOT_THE_LAYOUT)
                                                           and evidence.is_open())
        return [] if accepted else [f"{where}: the first step's replay was skipped for a reason the rule does "
                                    f"not accept: {skipped}"]
    if value.get("agree") is not True:
        return [f"{where}: {value.get('error', 'the first step did not agree with the workload optimizer')}"]
    return []


def _judged(score: LogEvent, required: int, source: str) -> list[str]:
    value = score.value if isinstance(score.value, dict) else {}
    where = f"line {score.line}"
    if value.get("agree") is not True:
        disagreeing = value.get("disagreeing") or []
        return [f"{where}: predict() disagreed with the exported weights on {len(disagreeing)} of "
                f"{value.get('utterances', '?')} utterances{': ' + value['error'] if 'error' in value else ''}"]
    utterances = value.get("utterances")
    if not isinstance(utterances, int) or utterances < required:
        return [f"{where}: the independent score re-scored {utterances!r} utterances, {source} asks for {required}"]
    return []


def _utterances(evaluation: LogEvent) -> int:
    count = evaluation.metadata.get(keys.UTTERANCES)
    return count if isinstance(count, int) and count > 0 else 1


def _exported_weights(evidence: Evidence) -> list[str]:
    """The exported weights the log names are the file in the run folder, byte for byte."""
    events = evidence.log.keyed(keys.EXPORTED_WEIGHTS)
    if not events or evidence.folder is None:
        return []
    event = events[-1]
    value = event.value if isinstance(event.value, dict) else {}
    path = evidence.folder.root / str(value.get("path", ""))
    if not path.is_file():
        return [f"line {event.line}: the exported weights {value.get('path')!r} are not in the run folder"]
    if hashlib.sha256(path.read_bytes()).hexdigest() != value.get("sha256"):
        return [f"line {event.line}: {value.get('path')} is not the file the log names (sha256 differs)"]
    return []
