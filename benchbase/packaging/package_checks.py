"""`benchbase package check`: what MLPerf's package checker does, where it carries over to benchbase.

For each organization's folder of a package (layout.py):

- system_description: every systems/SYSTEM.json has MLPerf's 33 keys, a status MLPerf accepts,
  a division, and names its own submitter and system; every results/SYSTEM has one;
- result_count: each results/SYSTEM/WORKLOAD holds the runs its score needs: exactly the
  RCP's submission_runs where an RCP ships for the workload, else the olympic score's minimum;
- compliance: every result file passes `benchbase check`'s rule set (strict: MLPerf lets one
  file fail under olympic scoring, benchbase has no reviewer to accept it), and says it is of
  the workload and division it is filed under;
- seeds (closed division): every run logs an integer seed, no two alike;
- rcp (closed division): the set meets its workload's reference convergence points.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchbase.compliance.checker import check_log
from benchbase.compliance.keys import constants
from benchbase.compliance.parse import ParsedLog, read_log
from benchbase.compliance.rules import RuleSet
from benchbase.errors import InputError
from benchbase.packaging.layout import OrgFolder, ResultSet, org_folders
from benchbase.packaging.rcp_sets import judge_result_set, shipped_rcp
from benchbase.packaging.runs import log_value
from benchbase.packaging.system_description import AVAILABILITY, REQUIRED_KEYS
from benchbase.report.scoring import OLYMPIC_MINIMUM_RUNS
from benchbase.specs import WorkloadSpec

__all__ = ["FAIL", "PASS", "SKIP", "PackageCheck", "check_package", "read_system_description"]

PASS, FAIL, SKIP = "pass", "fail", "skip"
DIVISIONS = (constants.CLOSED, constants.OPEN)
SHOWN_PER_FILE = 3
"""A result file's compliance failures shown; `benchbase check FILE` lists them all."""


@dataclass(frozen=True)
class PackageCheck:
    """One check's verdict on one part of a package."""

    check: str
    subject: str
    """ORG/systems/SYSTEM.json, or ORG/SYSTEM/WORKLOAD for a result set."""
    status: str
    messages: tuple[str, ...] = ()
    """Why it failed or was skipped; for a pass, what a reader should know."""

    @property
    def passed(self) -> bool:
        return self.status != FAIL


def check_package(path: Path, ruleset: RuleSet, workloads: Mapping[str, WorkloadSpec]) -> list[PackageCheck]:
    """Every check on every part of the package at ``path``; InputError when it is no package."""
    found: list[PackageCheck] = []
    for org in org_folders(path):
        found += [_system_check(org, system) for system in org.systems()]
        for result_set in org.result_sets():
            found += _result_set_checks(org, result_set, ruleset, workloads)
    return found


def read_system_description(org: OrgFolder, system: str) -> dict[str, Any]:
    """systems/SYSTEM.json as a mapping; InputError where it is missing or not a JSON object."""
    path = org.system_description(system)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"{path}: cannot read the system description: {error.strerror or error}") from None
    except ValueError as error:
        raise InputError(f"{path}: not JSON: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def _system_check(org: OrgFolder, system: str) -> PackageCheck:
    subject = f"{org.org}/systems/{system}.json"
    try:
        description = read_system_description(org, system)
    except InputError as error:
        return PackageCheck("system_description", subject, FAIL, (str(error),))
    problems = [f"missing key {key}" for key in REQUIRED_KEYS if key not in description]
    stated = {"submitter": org.org, "system_name": system}
    problems += [f"{key} is {description[key]!r}, not the folder's {name!r}" for key, name in stated.items()
                 if key in description and description[key] != name]
    if "status" in description and description["status"] not in AVAILABILITY.values():
        problems.append(f"status {description['status']!r} is none of MLPerf's {sorted(AVAILABILITY.values())}")
    if "division" in description and description["division"] not in DIVISIONS:
        problems.append(f"division {description['division']!r} is neither closed nor open")
    return PackageCheck("system_description", subject, FAIL if problems else PASS, tuple(problems))


def _result_set_checks(org: OrgFolder, result_set: ResultSet, ruleset: RuleSet,
                       workloads: Mapping[str, WorkloadSpec]) -> list[PackageCheck]:
    subject = f"{org.org}/{result_set.label}"
    try:
        division = read_system_description(org, result_set.system).get("division")
    except InputError as error:
        return [PackageCheck("system_description", subject, FAIL, (f"{error} (the results' system)",))]
    files = result_set.result_files()
    logs = [(path, read_log(path)) for path in files]
    closed = division == constants.CLOSED
    return [
        _count_check(subject, result_set, len(files)),
        _compliance_check(subject, result_set, str(division), logs, ruleset, workloads),
        _seed_check(subject, logs) if closed else _skipped("seeds", subject, division),
        _rcp_check(subject, result_set.workload, logs) if closed else _skipped("rcp", subject, division),
    ]


def _count_check(subject: str, result_set: ResultSet, count: int) -> PackageCheck:
    rcp = shipped_rcp(result_set.workload)
    notes = tuple(f"{name}: not a result_I.txt (MLPerf's checker warns of it)" for name in result_set.other_files())
    if rcp is not None:
        needed = rcp[0].submission_runs
        wrong = count != needed
        why = f"{count} result file(s); the RCP of {result_set.workload} ({rcp[1]}) needs exactly {needed}"
    else:
        wrong = count < OLYMPIC_MINIMUM_RUNS
        why = (f"{count} result file(s); no RCP ships for {result_set.workload}, and the olympic score needs at "
               f"least {OLYMPIC_MINIMUM_RUNS}")
    return PackageCheck("result_count", subject, FAIL if wrong else PASS, (why, *notes))


def _compliance_check(subject: str, result_set: ResultSet, division: str, logs: list[tuple[Path, ParsedLog]],
                      ruleset: RuleSet, workloads: Mapping[str, WorkloadSpec]) -> PackageCheck:
    problems = []
    for path, log in logs:
        stated = {"submission_benchmark": (log_value(log, constants.SUBMISSION_BENCHMARK), result_set.workload),
                  "submission_division": (log_value(log, constants.SUBMISSION_DIVISION), division)}
        problems += [f"{path.name}: {key} {value!r}, but it is filed under {where!r}"
                     for key, (value, where) in stated.items() if value != where]
        failures = check_log(path, ruleset, workloads).failures
        problems += [f"{path.name}: {failure}" for failure in failures[:SHOWN_PER_FILE]]
        if len(failures) > SHOWN_PER_FILE:
            problems.append(f"{path.name}: ... {len(failures) - SHOWN_PER_FILE} more (`benchbase check {path}`)")
    passed = f"{len(logs)} result file(s) pass rule set {ruleset.version}"
    return PackageCheck("compliance", subject, FAIL if problems else PASS, tuple(problems) or (passed,))


def _seed_check(subject: str, logs: list[tuple[Path, ParsedLog]]) -> PackageCheck:
    problems: list[str] = []
    first_with: dict[int, str] = {}
    for path, log in logs:
        seed = log_value(log, constants.SEED)
        if not isinstance(seed, int) or isinstance(seed, bool):
            problems.append(f"{path.name}: logs no integer seed ({seed!r})")
        elif seed in first_with:
            problems.append(f"{path.name}: seed {seed}, as {first_with[seed]}")
        else:
            first_with[seed] = path.name
    return PackageCheck("seeds", subject, FAIL if problems else PASS,
                        tuple(problems) or (f"seeds {sorted(first_with)}",))


def _rcp_check(subject: str, workload: str, logs: list[tuple[Path, ParsedLog]]) -> PackageCheck:
    rcp = shipped_rcp(workload)
    if rcp is None:
        return PackageCheck("rcp", subject, SKIP, (f"no RCP ships with benchbase for {workload}",))
    if not logs:
        return PackageCheck("rcp", subject, FAIL, ("no result files to judge",))
    try:
        judged = judge_result_set(logs, *rcp)
    except InputError as error:
        return PackageCheck("rcp", subject, FAIL, (str(error),))
    # A failure says which targets failed; a pass, which scores MLPerf would normalize.
    shown = [(label, verdict) for label, verdict in judged.verdicts.items()
             if (verdict.norm_factor > 1 if judged.passed else not verdict.passed)]
    lines = tuple(f"{label}: {verdict.explanation}" for label, verdict in shown)
    return PackageCheck("rcp", subject, PASS if judged.passed else FAIL, lines or (f"meets {rcp[1]}",))


def _skipped(check: str, subject: str, division: Any) -> PackageCheck:
    return PackageCheck(check, subject, SKIP, (f"division {division!r}: MLPerf checks it in the closed division only",))
