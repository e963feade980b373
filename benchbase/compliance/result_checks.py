"""Checks of what the run reports against what its log records: result.json's seed, status, TTA,
final evaluation and environment, and the account of a resumed run."""

from __future__ import annotations

from benchbase.compliance import keys
from benchbase.compliance import rules as r
from benchbase.compliance.check_registry import check
from benchbase.compliance.evidence import Evidence, Skip, same_value, short
from benchbase.compliance.keys import constants
from benchbase.compliance.tta_check import recompute_tta_messages
from benchbase.run_folder import SEGMENTS_DIR
from benchbase.specs import RunResult
from benchbase.specs.numbers import is_number
from benchbase.specs.overrides import MISSING, field_at

__all__ = ["environment", "final_evaluation", "result_consistency", "result_tta", "resumes"]


@check(r.ResultConsistencyRule)
def result_consistency(rule: r.ResultConsistencyRule, evidence: Evidence) -> list[str]:
    result = _result(evidence)
    stops = evidence.log.keyed(constants.RUN_STOP)
    pairs = [("seed", evidence.value_of(constants.SEED), result.seed),
             ("workload", evidence.value_of(constants.SUBMISSION_BENCHMARK), result.workload),
             ("status", stops[-1].metadata.get(constants.STATUS) if stops else MISSING, result.status)]
    messages = [f"result.json says {name} {claimed!r}, the log says {logged!r}"
                for name, logged, claimed in pairs if logged is not MISSING and logged != claimed]
    if result.status == constants.SUCCESS and None in result.tta.values():
        messages.append(f"result.json says {constants.SUCCESS}, but not every target was reached")
    return messages


@check(r.ResultTTARule)
def result_tta(rule: r.ResultTTARule, evidence: Evidence) -> list[str]:
    _result(evidence)
    messages = recompute_tta_messages(evidence, rule.tolerance_seconds, rule.tolerance_fraction)
    if messages is None:
        raise Skip("no TTA rule: neither config.json nor a registered workload states the targets")
    return messages


@check(r.FinalEvaluationRule)
def final_evaluation(rule: r.FinalEvaluationRule, evidence: Evidence) -> list[str]:
    result = _result(evidence)
    workload, source = evidence.reference_workload()
    logged = {event.metadata.get(keys.SUBSET): event for event in evidence.log.keyed(keys.FINAL_ACCURACY)}
    claimed = result.final_evaluation
    if claimed is None:
        return [f"result.json has no final evaluation, but the log has {len(logged)}"] if logged else []
    subsets = claimed.get("subsets") if isinstance(claimed, dict) else None
    if not isinstance(subsets, dict):
        return ["result.json's final_evaluation has no subsets mapping"]
    expected = [*(field_at(workload, "data.dev") or []), *(field_at(workload, "data.test") or [])]
    messages = [f"the final evaluation left out {subset} ({source} names it)" for subset in expected
                if subset not in logged]
    for subset, rates in subsets.items():
        event = logged.get(subset)
        if event is None or not isinstance(event.value, dict) or not isinstance(rates, dict):
            messages.append(f"result.json's final evaluation of {subset!r} is not in the log")
            continue
        for metric in ("wer", "cer", "paper_cer", "loss"):
            if not same_value(rates.get(metric), event.value.get(metric)):
                messages.append(f"result.json's final {metric} on {subset} is {rates.get(metric)!r}, the log's "
                                f"(line {event.line}) is {event.value.get(metric)!r}")
    return messages


@check(r.ResumesRule)
def resumes(rule: r.ResumesRule, evidence: Evidence) -> list[str]:
    """A resumed run's account holds together: each resume goes on from a checkpoint the log wrote
    before it, after that checkpoint's time and after its own interruption, with the interrupted
    segment kept in the folder and result.json counting the same resumes."""
    log, messages = evidence.log, []
    checkpoints = {event.value: event for event in log.keyed(keys.CHECKPOINT) if isinstance(event.value, str)}
    recorded = log.resumes()
    for event in log.keyed(keys.RESUME):
        value = event.value if isinstance(event.value, dict) else {}
        where = f"line {event.line}"
        if not (isinstance(value.get("checkpoint"), str) and is_number(value.get("interrupted_at_s"))):
            messages.append(f"{where}: {keys.RESUME} needs a checkpoint and a numeric interrupted_at_s")
            continue
        named = checkpoints.get(value["checkpoint"])
        if named is None or named.line > event.line:
            messages.append(f"{where}: resumes from {value['checkpoint']!r}, which the log never wrote before it")
        elif named.metadata.get(keys.BATCH) != value.get("batch"):
            messages.append(f"{where}: resumes at batch {value.get('batch')}, but {value['checkpoint']} was "
                            f"written at batch {named.metadata.get(keys.BATCH)}")
        elif (log.run_clock(named.time_ms) or 0.0) > value["interrupted_at_s"] + rule.tolerance_seconds:
            messages.append(f"{where}: interrupted at {value['interrupted_at_s']} s, before its own checkpoint was "
                            f"written at {log.run_clock(named.time_ms):.3f} s")
        segment = str(value.get("segment"))
        if evidence.folder is not None and not evidence.folder.segment(segment).compliance_log.is_file():
            messages.append(f"{where}: the interrupted segment {SEGMENTS_DIR}/{segment}/ is not in the folder")
    messages += [f"line {event.line}: the run resumed {-downtime:.3f} s before its own interruption"
                 for event, downtime in recorded if downtime < -rule.tolerance_seconds]
    if evidence.result is not None and len(evidence.result.resumes) != len(log.keyed(keys.RESUME)):
        messages.append(f"result.json lists {len(evidence.result.resumes)} resume(s), the log "
                        f"{len(log.keyed(keys.RESUME))}")
    return messages


@check(r.EnvironmentRule)
def environment(rule: r.EnvironmentRule, evidence: Evidence) -> list[str]:
    recorded = evidence.log.first(keys.ENVIRONMENT)
    if recorded is None:
        return [f"no {keys.ENVIRONMENT} event: the software environment the run measured is not on record"]
    if not isinstance(recorded.value, dict):
        return [f"line {recorded.line}: {keys.ENVIRONMENT} is {short(recorded.value)}, not a mapping"]
    missing = [path for path in rule.required if field_at(recorded.value, path) in (MISSING, None, "", {}, [])]
    messages = [f"line {recorded.line}: {keys.ENVIRONMENT} lacks {', '.join(missing)}"] if missing else []
    if evidence.result is not None:
        claimed = _result(evidence).environment
        if claimed and claimed != recorded.value:
            messages.append(f"result.json's environment differs from the log's {keys.ENVIRONMENT} "
                            f"(line {recorded.line})")
    return messages


def _result(evidence: Evidence) -> RunResult:
    if evidence.result is None:
        raise Skip("no result.json beside the log, or none that holds a run result")
    return evidence.result
