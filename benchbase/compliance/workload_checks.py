"""Checks of the log against the workload it is held to: the registered one for a closed run,
its own config.json for an open one (Evidence.reference_workload). The evaluations follow the
workload's cadence and subsets, the pinned hyperparameters are the workload's, and the division
the run claims is the one its configuration puts it in."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from pydantic import ValidationError

from benchbase.compliance import keys
from benchbase.compliance import rules as r
from benchbase.compliance.check_registry import check
from benchbase.compliance.evidence import Evidence, Skip, same_value, short
from benchbase.compliance.keys import constants
from benchbase.data.registered import data_departures
from benchbase.specs import WorkloadSpec
from benchbase.specs.overrides import MISSING, field_at, open_changes, set_field_at
from benchbase.specs.strategy import DEFAULT_STRATEGY

__all__ = ["compilation", "division", "eval_cadence", "eval_subsets", "fixed_hyperparameters"]


@check(r.EvalCadenceRule)
def eval_cadence(rule: r.EvalCadenceRule, evidence: Evidence) -> list[str]:
    workload, source = evidence.reference_workload()
    every = field_at(workload, "evaluation.every_epochs")
    if not isinstance(every, int) or every < 1:
        raise Skip(f"{source} has no evaluation.every_epochs")
    ended = [event.epoch() for event in evidence.log.keyed(constants.EPOCH_STOP) if event.epoch() is not None]
    # eval_stop, not eval_accuracy: an evaluation logs one eval_accuracy per dev subset.
    evaluated = Counter(event.epoch() for event in evidence.log.keyed(constants.EVAL_STOP)
                        if event.epoch() is not None)
    expected = [epoch for epoch in ended if epoch % every == 0]
    if expected and ended and expected[-1] == ended[-1] and _aborted(evidence):
        expected = expected[:-1]  # a run stopped by its time limit ends mid-epoch, before that evaluation
    messages = [f"epoch {epoch} ended without an evaluation (skipped evaluation; the workload evaluates "
                f"every {every} epoch(s))" for epoch in expected if epoch not in evaluated]
    messages += [f"epoch {epoch} is evaluated {count} times" for epoch, count in evaluated.items() if count > 1]
    messages += [f"an evaluation at epoch {epoch}, which the workload does not evaluate (every {every})"
                 for epoch in evaluated if epoch % every]
    return messages


@check(r.CompilationRule)
def compilation(rule: r.CompilationRule, evidence: Evidence) -> list[str]:
    workload, source = evidence.reference_workload()
    where = field_at(workload, "tta.compilation")
    where = "on_clock" if where is MISSING else where  # a workload from before the rule: the paper's
    warm_ups = evidence.log.keyed(keys.WARM_UP)
    if where != "before_run_start":
        return [f"line {event.line}: {keys.WARM_UP}, a build and compilation off the clock, but {source} puts "
                f"them on the clock (tta.compilation: {where})" for event in warm_ups]
    if not warm_ups:
        return [f"{source} builds and compiles before run_start (tta.compilation: before_run_start), but the log "
                f"holds no {keys.WARM_UP}"]
    init_start, init_stop = evidence.log.first(constants.INIT_START), evidence.log.first(constants.INIT_STOP)
    first = warm_ups[0]
    if init_start is None or init_stop is None or not init_start.line < first.line < init_stop.line:
        return [f"line {first.line}: the first {keys.WARM_UP} is not between init_start and init_stop"]
    resumes = evidence.log.keyed(keys.RESUME)
    if len(warm_ups) > 1 + len(resumes):
        return [f"{keys.WARM_UP} appears {len(warm_ups)} times: once in init and once per resume "
                f"({len(resumes)}) at most"]
    return []


@check(r.FixedHyperparametersRule)
def fixed_hyperparameters(rule: r.FixedHyperparametersRule, evidence: Evidence) -> list[str]:
    workload, source = evidence.reference_workload()
    configured = (evidence.config or {}).get("workload")
    configured = configured if isinstance(configured, dict) else None
    chosen, messages = _run_choices(rule, evidence, configured)
    foreign = _other_optimizers_keys(field_at(workload, "optimizer.name"))
    for key, path in rule.log_keys.items():
        pinned, logged = field_at(workload, path), evidence.value_of(key)
        if path in chosen:
            continue  # the run chose it, and its log and config.json say the same
        if key in foreign:
            continue  # a key of another optimizer than the workload's (opt_adadelta_rho of an adamw run)
        if logged is MISSING:
            messages.append(f"{key} is not in the log ({source} pins {path} = {pinned!r})")
        elif pinned is not MISSING and not same_value(logged, pinned):
            messages.append(f"{key} is {logged!r} in the log, but {source} pins {path} = {pinned!r}")
    if evidence.workload is not None and configured is not None and not evidence.is_open():
        registered = _with_values(evidence.workload, chosen)
        for path in rule.config_fields:
            pinned, used = field_at(registered, path), field_at(configured, path)
            if not same_value(used, pinned):
                messages.append(f"config.json has workload.{path} = {short(used)}, but the registered workload "
                                f"pins {short(pinned)}")
    return messages


def _other_optimizers_keys(name: Any) -> set[str]:
    """The log keys of every optimizer but ``name`` (a workload written before optimizers had names: adadelta)."""
    name = name if isinstance(name, str) else "adadelta"
    own = set(keys.OPTIMIZER_KEYS.get(name, {}))
    return {key for other, found in keys.OPTIMIZER_KEYS.items() if other != name for key in found} - own


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
        set_field_at(copied, path, value)
    return copied


@check(r.EvalSubsetsRule)
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
        messages.append(f"{keys.TTA_SUBSET} is {short(logged)} in the log, but {source} scores TTA on {scored!r}")
    by_epoch: dict[int | None, Counter] = {}
    for event in evidence.log.keyed(constants.EVAL_ACCURACY):
        by_epoch.setdefault(event.epoch(), Counter())[event.metadata.get(keys.SUBSET)] += 1
    for epoch, subsets in by_epoch.items():
        if subsets != Counter(dev):
            messages.append(f"the evaluation of epoch {epoch} scored {_counted(subsets)}, but {source} evaluates "
                            f"each of {', '.join(dev)} once (pooled or missing subsets)")
    return messages


@check(r.DivisionRule)
def division(rule: r.DivisionRule, evidence: Evidence) -> list[str]:
    """A closed run is the registered workload but for its run choices; an open one says what it changed."""
    stated = evidence.log.first(constants.SUBMISSION_DIVISION)
    if stated is None:
        return [f"no {constants.SUBMISSION_DIVISION}: the run states no division"]
    if stated.value not in (constants.CLOSED, constants.OPEN):
        return [f"line {stated.line}: {constants.SUBMISSION_DIVISION} is {stated.value!r}, neither "
                f"{constants.CLOSED} nor {constants.OPEN}"]
    changes = evidence.log.first(keys.OPEN_CHANGES)
    logged = changes.value if changes is not None and isinstance(changes.value, list) else []
    configured = _with_defaults((evidence.config or {}).get("workload"))
    strategies = _strategies(evidence)
    disagreeing = [f"{where} states training strategy {name!r}, {strategies[0][0]} {strategies[0][1]!r}"
                   for where, name in strategies[1:] if name != strategies[0][1]]
    if stated.value == constants.OPEN:
        # Held to its own config.json by the rules above. Where the log lists what was changed (benchbase
        # run does; a run configured in code may not), the list must be config.json's changes.
        if evidence.workload is None or not isinstance(configured, dict) or not logged:
            return disagreeing
        unlisted = [change for change in open_changes(evidence.workload, configured) if change not in logged]
        return disagreeing + ([f"config.json departs from the registered workload in what the log's "
                               f"{keys.OPEN_CHANGES} does not list: {'; '.join(unlisted[:5])}"] if unlisted else [])
    messages = disagreeing
    if logged:
        messages.append(f"line {stated.line}: claims the closed division, but the log lists what the run changed: "
                        f"{short(logged)}")
    messages += [f"line {stated.line}: claims the closed division, but {where} trains with strategy {name!r} "
                 f"(the closed division trains {DEFAULT_STRATEGY!r})" for where, name in _strategies(evidence)
                 if name != DEFAULT_STRATEGY]
    if evidence.workload is None:
        if evidence.config is not None:
            messages.append(f"line {stated.line}: claims the closed division, but its workload is not registered here")
        return messages
    if rule.registered_data:
        messages += _unregistered_data(evidence, stated.line)
    if isinstance(configured, dict):
        found = open_changes(evidence.workload, configured)
        if found:
            messages.append(f"line {stated.line}: claims the closed division, but config.json departs from the "
                            f"registered workload: {'; '.join(found[:5])}")
    return messages


def _unregistered_data(evidence: Evidence, line: int) -> list[str]:
    """A closed claim's data against the registered workload's (benchbase.data.registered)."""
    stated = evidence.log.first(keys.DATA)
    if stated is None or not isinstance(stated.value, dict):
        return [f"line {line}: claims the closed division, but the log does not state its data ({keys.DATA})"]
    departures = data_departures(WorkloadSpec.model_validate(evidence.workload), stated.value)
    if not departures:
        return []
    return [f"line {line}: claims the closed division, but line {stated.line}'s data is not the registered "
            f"workload's: {'; '.join(departures[:5])}"]


def _strategies(evidence: Evidence) -> list[tuple[str, Any]]:
    """The training strategy the log and config.json state (neither: the run predates strategies, sync)."""
    stated = []
    logged = evidence.log.first(keys.STRATEGY)
    if logged is not None:
        stated.append((f"line {logged.line}", logged.value.get("name") if isinstance(logged.value, dict) else None))
    configured = (evidence.config or {}).get("strategy")
    if configured is not None:
        stated.append(("config.json", configured.get("name") if isinstance(configured, dict) else None))
    return stated


def _with_defaults(configured: Any) -> Any:
    """config.json's workload as the spec reads it: a field it lacks takes its default, as it did
    when the run was made (a config.json written before the field existed). A workload the spec
    refuses (a required field deleted, a wrong value) stays as written, absent fields and all."""
    if not isinstance(configured, dict):
        return configured
    try:
        return WorkloadSpec.model_validate(configured).model_dump(mode="json")
    except ValidationError:
        return configured


def _aborted(evidence: Evidence) -> bool:
    stops = evidence.log.keyed(constants.RUN_STOP)
    return bool(stops) and stops[-1].metadata.get(constants.STATUS) == constants.ABORTED


def _counted(subsets: Counter) -> str:
    return ", ".join(f"{subset} x{count}" if count > 1 else str(subset) for subset, count in subsets.items())
