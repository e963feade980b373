"""Checks of the log on its own: its lines, its lifecycle, the events it must hold and what it
records about how the run behaved (the thread budget, the devices, a non-finite stop)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchbase.compliance import keys
from benchbase.compliance import rules as r
from benchbase.compliance.check_registry import MESSAGES_PER_RULE, check
from benchbase.compliance.evidence import Evidence, Skip, short
from benchbase.compliance.keys import constants
from benchbase.compliance.parse import LogEvent
from benchbase.compliance.precision_keys import lowest_numerical_precisions
from benchbase.specs.numbers import is_number
from benchbase.specs.strategy import DEFAULT_STRATEGY

__all__ = ["accuracy_value", "device_plan", "event_metadata", "init_duration", "key_counts", "lines_parse",
           "monotonic_time", "numeric_health", "order", "precision_keys", "run_stop_status", "thread_budget"]


@check(r.LinesParseRule)
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


@check(r.MonotonicTimeRule)
def monotonic_time(rule: r.MonotonicTimeRule, evidence: Evidence) -> list[str]:
    events = evidence.log.events
    return [f"line {later.line}: time_ms goes back {earlier.time_ms - later.time_ms:g} ms from line {earlier.line}"
            for earlier, later in zip(events, events[1:]) if later.time_ms < earlier.time_ms]


@check(r.KeyCountsRule)
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


@check(r.OrderRule)
def order(rule: r.OrderRule, evidence: Evidence) -> list[str]:
    messages = []
    for pair in rule.pairs:
        before, after = evidence.log.keyed(pair.before), evidence.log.keyed(pair.after)
        if before and after and before[-1].line > after[0].line:
            messages.append(f"{pair.before} must come before {pair.after}, but {pair.before} is at line "
                            f"{before[-1].line} and {pair.after} at line {after[0].line} (out of order)")
    return messages


@check(r.InitDurationRule)
def init_duration(rule: r.InitDurationRule, evidence: Evidence) -> list[str]:
    init_start, run_start = evidence.log.first(constants.INIT_START), evidence.log.first(constants.RUN_START)
    if init_start is None or run_start is None:
        raise Skip(f"needs {constants.INIT_START} and {constants.RUN_START}")
    minutes = (run_start.time_ms - init_start.time_ms) / 60_000
    if minutes > rule.max_minutes:
        return [f"init took {minutes:.1f} minutes ({constants.INIT_START} to {constants.RUN_START}), more than the "
                f"{rule.max_minutes:g} allowed"]
    return []


@check(r.RunStopRule)
def run_stop_status(rule: r.RunStopRule, evidence: Evidence) -> list[str]:
    stops = evidence.log.keyed(constants.RUN_STOP)
    if len(stops) != 1:
        return [f"{constants.RUN_STOP} appears {len(stops)} times{_lines(stops)}, expected exactly one"]
    status = stops[0].metadata.get(constants.STATUS)
    if status is None:
        return [f"{constants.RUN_STOP} at line {stops[0].line} has no {constants.STATUS}"]
    if status not in rule.statuses:
        return [f"{constants.RUN_STOP} at line {stops[0].line} has {constants.STATUS} {status!r}, not one of "
                f"{', '.join(rule.statuses)}"]
    return []


@check(r.EventMetadataRule)
def event_metadata(rule: r.EventMetadataRule, evidence: Evidence) -> list[str]:
    messages = []
    for event in evidence.log.keyed(rule.key):
        for name in rule.fields:
            if name not in event.metadata:
                messages.append(f"{rule.key} at line {event.line} has no {name}")
            elif name == constants.EPOCH_NUM and event.epoch() is None:
                messages.append(f"{rule.key} at line {event.line} has a non-integer {constants.EPOCH_NUM}")
    return messages


@check(r.AccuracyValueRule)
def accuracy_value(rule: r.AccuracyValueRule, evidence: Evidence) -> list[str]:
    messages = []
    for event in evidence.log.keyed(constants.EVAL_ACCURACY):
        value = event.value if isinstance(event.value, dict) else {}
        missing = [metric for metric in rule.metrics if not is_number(value.get(metric))]
        if missing:
            messages.append(f"{constants.EVAL_ACCURACY} at line {event.line} has no numeric {', '.join(missing)}")
    return messages


@check(r.NumericHealthRule)
def numeric_health(rule: r.NumericHealthRule, evidence: Evidence) -> list[str]:
    stops = evidence.log.keyed(constants.RUN_STOP)
    if stops and stops[-1].metadata.get(keys.STOP_REASON) == keys.StopReason.NON_FINITE:
        return [f"line {stops[-1].line}: the run ended on a non-finite number: "
                f"{short(stops[-1].metadata.get(keys.ERROR, 'no error recorded'))}"]
    return []


@check(r.ThreadBudgetRule)
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


@check(r.DevicePlanRule)
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
        messages.append(f"line {world.line}: {keys.WORLD_SIZE} is {world.value}, the plan's is "
                        f"{plan.get('world_size')}")
    devices = evidence.log.first(keys.DEVICES)
    if devices is None:
        if not _ended_by_error(evidence):
            messages.append(f"no {keys.DEVICES} event: the backends never reported their devices")
    elif isinstance(devices.value, list) and devices.value and len(devices.value) != plan.get("count"):
        messages.append(f"line {devices.line}: the backends reported {len(devices.value)} device(s) "
                        f"({short(devices.value)}), the plan has {plan.get('count')}")
    return messages


@check(r.PrecisionKeysRule)
def precision_keys(rule: r.PrecisionKeysRule, evidence: Evidence) -> list[str]:
    precision = evidence.log.first(keys.PRECISION)
    if precision is None:
        return [f"no {keys.PRECISION} event: the lowest numerical precisions cannot be held to the run's"]
    logged = evidence.log.first(keys.STRATEGY)
    strategy = logged.value.get("name") if logged is not None and isinstance(logged.value, dict) else DEFAULT_STRATEGY
    messages = []
    for key, expected in lowest_numerical_precisions(str(precision.value), str(strategy)).items():
        stated = evidence.log.first(key)
        if stated is None:
            messages.append(f"no {key} event: the log does not state the lowest precision it computed in")
        elif expected is not None and stated.value != expected:
            messages.append(f"line {stated.line}: {key} is {short(stated.value)}, but a run in {precision.value} "
                            f"(line {precision.line}) under strategy {strategy} states {expected}")
    return messages


def _profile_devices(evidence: Evidence, plan: dict) -> tuple[Any, Any]:
    """(kind, count) of the profile's devices: config.json's profile where the folder has one, else the log's."""
    hardware = (evidence.config or {}).get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("devices"), dict):
        devices = hardware["devices"]
        return ("cuda" if devices.get("kind") == "gpu" else "cpu"), devices.get("count")
    return plan.get("profile_kind"), plan.get("profile_count")


def _ended_by_error(evidence: Evidence) -> bool:
    stops = evidence.log.keyed(constants.RUN_STOP)
    return bool(stops) and stops[-1].metadata.get(keys.STOP_REASON) in (
        keys.StopReason.ERROR, keys.StopReason.INTERRUPTED, keys.StopReason.NON_FINITE)


def _lines(events: list[LogEvent]) -> str:
    return f" (lines {', '.join(str(event.line) for event in events[:10])})" if events else ""
