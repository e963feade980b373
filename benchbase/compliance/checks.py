"""The named Python functions that enforce rules: one per rule kind, looked up by its `check`.

Each takes the rule's data and the Evidence (the parsed log and, for a run folder, its
result.json, config.json and the registered workload) and returns failure messages; an empty
list passes. A check that lacks the evidence it needs raises Skip with the reason.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchbase.compliance import cross_examination, keys
from benchbase.compliance import rules as r
from benchbase.compliance.parse import LogEvent, ParsedLog, is_number
from benchbase.compliance.tta_check import recompute_tta_messages
from benchbase.run_folder import SEGMENTS_DIR, RunFolder
from benchbase.specs import RunResult
from benchbase.specs.overrides import open_changes

__all__ = ["CHECKS", "Evidence", "Skip", "field_at"]

MISSING = object()
MESSAGES_PER_RULE = 8


class Skip(Exception):
    """The check cannot run on this input (say, a bare log has no result.json)."""


@dataclass
class Evidence:
    source: str
    log: ParsedLog
    result: RunResult | None = None
    """result.json, when it is beside the log and holds a run result (else the run_files finding says why not)."""
    config: dict | None = None
    workload: dict | None = None
    """The registered workload the log names (model_dump in JSON mode), when known."""
    folder: RunFolder | None = None
    """The run folder the log sits in (result.json or config.json beside it); None for a bare log."""
    divisions: bool = False
    """The rule set knows MLPerf's divisions (it has a ``division`` rule): an open run is held to its own config."""

    def reference_workload(self) -> tuple[dict, str]:
        """The workload the run is held to: the registered one for a closed run, the run's own
        config.json for an open one (or where the workload is not registered here)."""
        configured = (self.config or {}).get("workload")
        if self.workload is not None and not (self.is_open() and isinstance(configured, dict)):
            return self.workload, "the registered workload"
        if isinstance(configured, dict):
            if self.workload is not None:
                return configured, "the run's own config.json (open division)"
            return configured, "config.json (workload not registered here)"
        raise Skip("no workload spec: the log names no registered workload and there is no config.json")

    def is_open(self) -> bool:
        """The log places the run in the open division (MLPerf's term: its workload departs from the
        registered one), under a rule set that knows divisions (1.3 and later: rule ``division``).
        Older rule sets hold every run to the registered workload, as they always did."""
        return self.divisions and self.value_of("submission_division") == "open"

    def value_of(self, key: str) -> Any:
        event = self.log.first(key)
        return MISSING if event is None else event.value


def field_at(data: Any, path: str) -> Any:
    """The value at a dotted path in nested dicts, or MISSING."""
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


def lines_parse(rule: r.LinesParseRule, evidence: Evidence) -> list[str]:
    log = evidence.log
    messages = [problem.message for problem in log.problems]
    if log.problem_count > MESSAGES_PER_RULE:
        # Only the first messages are reported (and the parse keeps only the first problems):
        # how many lines fail, and an empty log, go first.
        summary = [f"{log.problem_count} of the log's {log.lines} lines are not well-formed MLLOG events"]
        return summary + (["the log holds no MLLOG events"] if not log.events else []) + messages
    if not log.events:
        messages.append("the log holds no MLLOG events")
    return messages


def monotonic_time(rule: r.MonotonicTimeRule, evidence: Evidence) -> list[str]:
    events = evidence.log.events
    return [f"line {later.line}: time_ms goes back {earlier.time_ms - later.time_ms:g} ms from line {earlier.line}"
            for earlier, later in zip(events, events[1:]) if later.time_ms < earlier.time_ms]


def key_counts(rule: r.KeyCountsRule, evidence: Evidence) -> list[str]:
    counts = Counter(event.key for event in evidence.log.events)
    messages = []
    for item in rule.keys:
        found = counts[item.key]
        if item.exactly is not None and found != item.exactly:
            lines = _lines(evidence.log.keyed(item.key))
            messages.append(f"{item.key} appears {found} times{lines}, expected exactly {item.exactly}"
                            + (" (duplicated key)" if found > item.exactly else " (missing key)"))
        elif item.at_least is not None and found < item.at_least:
            messages.append(f"{item.key} appears {found} times, expected at least {item.at_least} (missing key)")
    return messages


def order(rule: r.OrderRule, evidence: Evidence) -> list[str]:
    messages = []
    for pair in rule.pairs:
        before, after = evidence.log.keyed(pair.before), evidence.log.keyed(pair.after)
        if before and after and before[-1].line > after[0].line:
            messages.append(f"{pair.before} must come before {pair.after}, but {pair.before} is at line "
                            f"{before[-1].line} and {pair.after} at line {after[0].line} (out of order)")
    return messages


def init_duration(rule: r.InitDurationRule, evidence: Evidence) -> list[str]:
    init_start, run_start = evidence.log.first("init_start"), evidence.log.first("run_start")
    if init_start is None or run_start is None:
        raise Skip("needs init_start and run_start")
    minutes = (run_start.time_ms - init_start.time_ms) / 60_000
    if minutes > rule.max_minutes:
        return [f"init took {minutes:.1f} minutes (init_start to run_start), more than the {rule.max_minutes:g} allowed"]
    return []


def run_stop_status(rule: r.RunStopRule, evidence: Evidence) -> list[str]:
    stops = evidence.log.keyed("run_stop")
    if len(stops) != 1:
        return [f"run_stop appears {len(stops)} times{_lines(stops)}, expected exactly one"]
    status = stops[0].metadata.get("status")
    if status is None:
        return [f"run_stop at line {stops[0].line} has no status"]
    if status not in rule.statuses:
        return [f"run_stop at line {stops[0].line} has status {status!r}, not one of {', '.join(rule.statuses)}"]
    return []


def event_metadata(rule: r.EventMetadataRule, evidence: Evidence) -> list[str]:
    messages = []
    for event in evidence.log.keyed(rule.key):
        for name in rule.fields:
            if name not in event.metadata:
                messages.append(f"{rule.key} at line {event.line} has no {name}")
            elif name == "epoch_num" and event.epoch() is None:
                messages.append(f"{rule.key} at line {event.line} has a non-integer epoch_num")
    return messages


def accuracy_value(rule: r.AccuracyValueRule, evidence: Evidence) -> list[str]:
    messages = []
    for event in evidence.log.keyed("eval_accuracy"):
        value = event.value if isinstance(event.value, dict) else {}
        missing = [metric for metric in rule.metrics if not is_number(value.get(metric))]
        if missing:
            messages.append(f"eval_accuracy at line {event.line} has no numeric {', '.join(missing)}")
    return messages


def eval_cadence(rule: r.EvalCadenceRule, evidence: Evidence) -> list[str]:
    workload, source = evidence.reference_workload()
    every = field_at(workload, "evaluation.every_epochs")
    if not isinstance(every, int) or every < 1:
        raise Skip(f"{source} has no evaluation.every_epochs")
    ended = [event.epoch() for event in evidence.log.keyed("epoch_stop") if event.epoch() is not None]
    # eval_stop, not eval_accuracy: an evaluation logs one eval_accuracy per dev subset.
    evaluated = Counter(event.epoch() for event in evidence.log.keyed("eval_stop") if event.epoch() is not None)
    expected = [epoch for epoch in ended if epoch % every == 0]
    if expected and ended and expected[-1] == ended[-1] and _aborted(evidence):
        expected = expected[:-1]  # a run stopped by its time limit ends mid-epoch, before that evaluation
    messages = [f"epoch {epoch} ended without an evaluation (skipped evaluation; the workload evaluates "
                f"every {every} epoch(s))" for epoch in expected if epoch not in evaluated]
    messages += [f"epoch {epoch} is evaluated {count} times" for epoch, count in evaluated.items() if count > 1]
    messages += [f"an evaluation at epoch {epoch}, which the workload does not evaluate (every {every})"
                 for epoch in evaluated if epoch % every]
    return messages


def fixed_hyperparameters(rule: r.FixedHyperparametersRule, evidence: Evidence) -> list[str]:
    workload, source = evidence.reference_workload()
    configured = (evidence.config or {}).get("workload")
    configured = configured if isinstance(configured, dict) else None
    chosen, messages = _run_choices(rule, evidence, configured)
    for key, path in rule.log_keys.items():
        pinned, logged = field_at(workload, path), evidence.value_of(key)
        if path in chosen:
            continue  # the run chose it, and its log and config.json say the same
        if logged is MISSING:
            messages.append(f"{key} is not in the log ({source} pins {path} = {pinned!r})")
        elif pinned is not MISSING and not same_value(logged, pinned):
            messages.append(f"{key} is {logged!r} in the log, but {source} pins {path} = {pinned!r}")
    if evidence.workload is not None and configured is not None and not evidence.is_open():
        registered = _with_values(evidence.workload, chosen)
        for path in rule.config_fields:
            pinned, used = field_at(registered, path), field_at(configured, path)
            if not same_value(used, pinned):
                messages.append(f"config.json has workload.{path} = {_short(used)}, but the registered workload "
                                f"pins {_short(pinned)}")
    return messages


def _run_choices(rule: r.FixedHyperparametersRule, evidence: Evidence,
                 configured: dict | None) -> tuple[dict[str, Any], list[str]]:
    """The run's own choices ({path: value}) that the log and config.json agree on, and a message
    for each choice where they disagree (an edited log or an edited config.json)."""
    chosen: dict[str, Any] = {}
    messages = []
    if configured is None:
        return chosen, messages  # a bare log: nothing states the run's choice but the log itself
    keys_by_path = {path: key for key, path in rule.log_keys.items()}
    for path in rule.run_choices:
        key = keys_by_path[path]
        logged, used = evidence.value_of(key), field_at(configured, path)
        if logged is MISSING or used is MISSING:
            continue  # held to the registered workload below, which names what is missing
        if same_value(logged, used):
            chosen[path] = used
        else:
            messages.append(f"{key} is {logged!r} in the log, but config.json's workload.{path} is {used!r}: the "
                            "log and the run's configuration disagree")
    return chosen, messages


def _with_values(data: dict, values: dict[str, Any]) -> dict:
    """A copy of nested dicts ``data`` with each dotted path of ``values`` set."""
    if not values:
        return data
    copied = copy.deepcopy(data)
    for path, value in values.items():
        *parents, last = path.split(".")
        node = copied
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[last] = value
    return copied


def result_consistency(rule: r.ResultConsistencyRule, evidence: Evidence) -> list[str]:
    result = _result(evidence)
    stops = evidence.log.keyed("run_stop")
    pairs = [("seed", evidence.value_of("seed"), result.seed),
             ("workload", evidence.value_of("submission_benchmark"), result.workload),
             ("status", stops[-1].metadata.get("status") if stops else MISSING, result.status)]
    messages = [f"result.json says {name} {claimed!r}, the log says {logged!r}"
                for name, logged, claimed in pairs if logged is not MISSING and logged != claimed]
    if result.status == "success" and None in result.tta.values():
        messages.append("result.json says success, but not every target was reached")
    return messages


def result_tta(rule: r.ResultTTARule, evidence: Evidence) -> list[str]:
    _result(evidence)
    messages = recompute_tta_messages(evidence, rule.tolerance_seconds, rule.tolerance_fraction)
    if messages is None:
        raise Skip("no TTA rule: neither config.json nor a registered workload states the targets")
    return messages


def eval_subsets(rule: r.EvalSubsetsRule, evidence: Evidence) -> list[str]:
    workload, source = evidence.reference_workload()
    dev = field_at(workload, "data.dev")
    if not isinstance(dev, list | tuple) or not dev:
        raise Skip(f"{source} names no dev subsets")
    scored = field_at(workload, "tta.subset")
    scored = dev[0] if scored in (None, MISSING) else scored
    messages = []
    logged = evidence.value_of(keys.TTA_SUBSET)
    if logged != scored:
        messages.append(f"{keys.TTA_SUBSET} is {_short(logged)} in the log, but {source} scores TTA on {scored!r}")
    by_epoch: dict[int | None, Counter] = {}
    for event in evidence.log.keyed("eval_accuracy"):
        by_epoch.setdefault(event.epoch(), Counter())[event.metadata.get(keys.SUBSET)] += 1
    for epoch, subsets in by_epoch.items():
        if subsets != Counter(dev):
            messages.append(f"the evaluation of epoch {epoch} scored {_counted(subsets)}, but {source} evaluates "
                            f"each of {', '.join(dev)} once (pooled or missing subsets)")
    return messages


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


def numeric_health(rule: r.NumericHealthRule, evidence: Evidence) -> list[str]:
    stops = evidence.log.keyed("run_stop")
    if stops and stops[-1].metadata.get(keys.STOP_REASON) == "non_finite":
        return [f"line {stops[-1].line}: the run ended on a non-finite number: "
                f"{_short(stops[-1].metadata.get(keys.ERROR, 'no error recorded'))}"]
    return []


def thread_budget(rule: r.ThreadBudgetRule, evidence: Evidence) -> list[str]:
    measured = evidence.log.first(keys.CPU_CORES_IN_STEPS)
    if measured is None:
        if _ended_by_error(evidence):
            raise Skip("the run ended with an error before its thread use was recorded")
        return [f"no {keys.CPU_CORES_IN_STEPS} event: the CPU threads training used are unknown"]
    budget = measured.metadata.get(keys.THREAD_BUDGET)
    if not (is_number(measured.value) and is_number(budget)):
        return [f"line {measured.line}: {keys.CPU_CORES_IN_STEPS} needs a number and a numeric {keys.THREAD_BUDGET}"]
    if measured.value > budget + rule.allowance:
        return [f"line {measured.line}: training kept {measured.value:g} CPU cores busy, over its budget of "
                f"{budget:g} threads (+{rule.allowance:g} allowed)"]
    return []


def device_plan(rule: r.DevicePlanRule, evidence: Evidence) -> list[str]:
    planned = evidence.log.first(keys.DEVICE_PLAN)
    if planned is None or not isinstance(planned.value, dict):
        return [f"no {keys.DEVICE_PLAN} event with the plan's fields: the devices the run trained on are unknown"]
    plan, where = planned.value, f"line {planned.line}"
    messages = []
    profile = _profile_devices(evidence, plan)
    if not plan.get("overridden") and (plan.get("kind"), plan.get("count")) != profile:
        messages.append(f"{where}: the run trained on {plan.get('count')} {plan.get('kind')} device(s), but its "
                        f"hardware profile names {profile[1]} {profile[0]} and the log states no override")
    world = evidence.log.first(keys.WORLD_SIZE)
    if world is not None and world.value != plan.get("world_size"):
        messages.append(f"line {world.line}: {keys.WORLD_SIZE} is {world.value}, the plan's is {plan.get('world_size')}")
    devices = evidence.log.first(keys.DEVICES)
    if devices is None:
        if not _ended_by_error(evidence):
            messages.append(f"no {keys.DEVICES} event: the backends never reported their devices")
    elif isinstance(devices.value, list) and devices.value and len(devices.value) != plan.get("count"):
        messages.append(f"line {devices.line}: the backends reported {len(devices.value)} device(s) "
                        f"({_short(devices.value)}), the plan has {plan.get('count')}")
    return messages


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
        elif named.metadata.get("batch") != value.get("batch"):
            messages.append(f"{where}: resumes at batch {value.get('batch')}, but {value['checkpoint']} was "
                            f"written at batch {named.metadata.get('batch')}")
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


def division(rule: r.DivisionRule, evidence: Evidence) -> list[str]:
    """A closed run is the registered workload but for its run choices; an open one says what it changed."""
    stated = evidence.log.first("submission_division")
    if stated is None:
        return ["no submission_division: the run states no division"]
    if stated.value not in ("closed", "open"):
        return [f"line {stated.line}: submission_division is {stated.value!r}, neither closed nor open"]
    changes = evidence.log.first(keys.OPEN_CHANGES)
    logged = changes.value if changes is not None and isinstance(changes.value, list) else []
    configured = (evidence.config or {}).get("workload")
    if stated.value == "open":
        # Held to its own config.json by the rules above. Where the log lists what was changed (benchbase
        # run does; a run configured in code may not), the list must be config.json's changes.
        if evidence.workload is None or not isinstance(configured, dict) or not logged:
            return []
        unlisted = [change for change in open_changes(evidence.workload, configured) if change not in logged]
        return [f"config.json departs from the registered workload in what the log's {keys.OPEN_CHANGES} does "
                f"not list: {'; '.join(unlisted[:5])}"] if unlisted else []
    messages = []
    if logged:
        messages.append(f"line {stated.line}: claims the closed division, but the log lists what the run changed: "
                        f"{_short(logged)}")
    if evidence.workload is None:
        if evidence.config is not None:
            messages.append(f"line {stated.line}: claims the closed division, but its workload is not registered here")
        return messages
    if isinstance(configured, dict):
        found = open_changes(evidence.workload, configured)
        if found:
            messages.append(f"line {stated.line}: claims the closed division, but config.json departs from the "
                            f"registered workload: {'; '.join(found[:5])}")
    return messages


def environment(rule: r.EnvironmentRule, evidence: Evidence) -> list[str]:
    recorded = evidence.log.first(keys.ENVIRONMENT)
    if recorded is None:
        return [f"no {keys.ENVIRONMENT} event: the software environment the run measured is not on record"]
    if not isinstance(recorded.value, dict):
        return [f"line {recorded.line}: {keys.ENVIRONMENT} is {_short(recorded.value)}, not a mapping"]
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


def _profile_devices(evidence: Evidence, plan: dict) -> tuple[Any, Any]:
    """(kind, count) of the profile's devices: config.json's profile where the folder has one, else the log's."""
    hardware = (evidence.config or {}).get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("devices"), dict):
        devices = hardware["devices"]
        return ("cuda" if devices.get("kind") == "gpu" else "cpu"), devices.get("count")
    return plan.get("profile_kind"), plan.get("profile_count")


CHECKS: dict[str, Callable[[Any, Evidence], list[str]]] = {
    "lines_parse": lines_parse,
    "monotonic_time": monotonic_time,
    "key_counts": key_counts,
    "order": order,
    "init_duration": init_duration,
    "run_stop_status": run_stop_status,
    "event_metadata": event_metadata,
    "accuracy_value": accuracy_value,
    "eval_cadence": eval_cadence,
    "fixed_hyperparameters": fixed_hyperparameters,
    "result_consistency": result_consistency,
    "result_tta": result_tta,
    "thread_budget": thread_budget,
    "eval_subsets": eval_subsets,
    "final_evaluation": final_evaluation,
    "numeric_health": numeric_health,
    "decoded_outputs": cross_examination.decoded_outputs,
    "eval_counts": cross_examination.eval_counts,
    "timeline": cross_examination.timeline,
    "artifacts": cross_examination.artifacts,
    "device_plan": device_plan,
    "resumes": resumes,
    "division": division,
    "environment": environment,
}


def same_value(left: Any, right: Any) -> bool:
    if is_number(left) and is_number(right):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    return left == right


def _ended_by_error(evidence: Evidence) -> bool:
    stops = evidence.log.keyed("run_stop")
    return bool(stops) and stops[-1].metadata.get(keys.STOP_REASON) in ("error", "interrupted", "non_finite")


def _aborted(evidence: Evidence) -> bool:
    stops = evidence.log.keyed("run_stop")
    return bool(stops) and stops[-1].metadata.get("status") == "aborted"


def _counted(subsets: Counter) -> str:
    return ", ".join(f"{subset} x{count}" if count > 1 else str(subset) for subset, count in subsets.items())


def _lines(events: list[LogEvent]) -> str:
    return f" (lines {', '.join(str(event.line) for event in events[:10])})" if events else ""


def _short(value: Any) -> str:
    text = "missing" if value is MISSING else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
