"""`benchbase check`'s engine: a rule set applied to a log or a run folder, with findings.

Input is either a compliance log (result.json and config.json beside it are used when they
exist), a run folder (mllog.log, result.json, config.json) or a folder of run folders
(run-0, run-1, ...). Only input that cannot be checked at all (a missing path, a folder with
no log, a log, result.json or config.json that cannot be read: UnreadableFile, as every command
says it) is an InputError; everything inside a log is a finding, never an exception.

Resources are bounded: the log is streamed into compact events (parse.read_log), never held
whole, and each rule reports at most MESSAGES_PER_RULE messages and a count of the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchbase.compliance.check_registry import MESSAGES_PER_RULE
from benchbase.compliance.checks import CHECKS
from benchbase.compliance.evidence import Evidence, Skip
from benchbase.compliance.keys import constants
from benchbase.compliance.outcome import limit_note, why_unfinished
from benchbase.compliance.parse import ParsedLog, read_log
from benchbase.compliance.rules import DivisionRule, Rule, RuleSet, load_ruleset
from benchbase.errors import InputError, UnreadableFile
from benchbase.run_folder import CONFIG_NAME, LOG_NAME, RESULT_NAME, RunFolder, find_run_folders
from benchbase.specs import ResultProblem, WorkloadSpec, read_run_result

__all__ = ["CheckReport", "Finding", "capped", "check_evidence", "check_log", "check_paths", "what_it_checks"]

PASS, FAIL, SKIP, UNFINISHED = "pass", "fail", "skip", "unfinished"

PLAIN_ITEMS = 8
"""A longer list of settings (the fields a rule pins) is left to the rule set's file."""


@dataclass
class Finding:
    rule: str
    status: str
    messages: list[str] = field(default_factory=list)
    description: str = ""


@dataclass
class CheckReport:
    source: str
    ruleset: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What a reader should know beside the verdict (a resumed run says so here)."""
    unfinished: str | None = None
    """Why the log is of a run that did not finish (outcome.why_unfinished), else None: a log may
    pass every rule and still be no result."""

    @property
    def passed(self) -> bool:
        """Every rule passes: the log is compliant (a result only when it is also finished)."""
        return all(finding.status != FAIL for finding in self.findings)

    @property
    def verdict(self) -> str:
        """fail (some rule fails), unfinished (compliant, but of a run that did not finish: no
        result), or pass (a compliant log of a finished run)."""
        return FAIL if not self.passed else UNFINISHED if self.unfinished else PASS

    @property
    def failures(self) -> list[str]:
        """Every failure message, prefixed by the rule that found it."""
        return [f"{finding.rule}: {message}" for finding in self.findings if finding.status == FAIL
                for message in finding.messages]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "ruleset": self.ruleset, "passed": self.passed, "verdict": self.verdict,
                "unfinished": self.unfinished, "notes": self.notes,
                "findings": [asdict(finding) for finding in self.findings]}


def check_paths(paths: list[Path], ruleset: RuleSet | None = None,
                workloads: Mapping[str, WorkloadSpec] | None = None) -> list[CheckReport]:
    """One report per log found under the paths; InputError when a path holds none."""
    ruleset = ruleset or load_ruleset()
    reports = []
    for path in paths:
        for log in _logs_under(path):
            reports.append(check_log(log, ruleset, workloads))
    return reports


def check_log(log: Path, ruleset: RuleSet | None = None,
              workloads: Mapping[str, WorkloadSpec] | None = None) -> CheckReport:
    """Check one log, with the result.json and config.json beside it when they exist."""
    ruleset = ruleset or load_ruleset()
    try:
        parsed = read_log(log)
    except OSError as error:
        raise UnreadableFile(log, error) from None
    evidence = Evidence(source=str(log), log=parsed)
    folder = RunFolder(log.parent)
    file_problems = [_attach_result(evidence, folder.result), _attach_config(evidence, folder.config)]
    if folder.result.exists() or folder.config.exists():
        evidence.folder = folder
    evidence.workload = _registered_workload(evidence, workloads or {})
    report = check_evidence(evidence, ruleset)
    problems = [problem for problem in file_problems if problem]
    report.findings.insert(0, Finding("run_files", FAIL if problems else PASS, problems,
                                      f"{RESULT_NAME}, where present, is a run result; {CONFIG_NAME} a JSON object"))
    return report


def check_evidence(evidence: Evidence, ruleset: RuleSet) -> CheckReport:
    evidence.divisions = any(isinstance(rule, DivisionRule) for rule in ruleset.rules)
    limit = limit_note(evidence)
    report = CheckReport(source=evidence.source, ruleset=ruleset.version,
                         notes=resume_notes(evidence.log) + ([limit] if limit else []),
                         unfinished=why_unfinished(evidence))
    for rule in ruleset.rules:
        report.findings.append(_apply(rule, evidence))
    return report


def resume_notes(log: ParsedLog) -> list[str]:
    """One line per resume the log records: where it went on from, and what the clock counts."""
    notes = []
    for event, downtime in log.resumes():
        value = event.value
        notes.append(f"resumed (line {event.line}) from {value.get('checkpoint')} at batch {value.get('batch')}: "
                     f"interrupted at {value.get('interrupted_at_s')} s on the run clock, "
                     f"{value.get('lost_s')} s of work lost since the checkpoint (counted), down {downtime:.1f} s "
                     "(not counted)")
    return notes


def _apply(rule: Rule, evidence: Evidence) -> Finding:
    try:
        messages = CHECKS[rule.check](rule, evidence)
    except Skip as reason:
        return Finding(rule.check, SKIP, [str(reason)], what_it_checks(rule))
    except Exception as error:  # noqa: BLE001 - a checker bug must still be a finding, not a traceback on a user's log
        messages = [f"checker error in {rule.check}: {type(error).__name__}: {error}"]
    return Finding(rule.check, FAIL if messages else PASS, capped(messages), what_it_checks(rule))


def what_it_checks(rule: Rule) -> str:
    """The rule's own description, else its kind's, with its plain settings: rules of one kind
    (five event_metadata rules, one per key) tell apart in `check -v`."""
    described = rule.description or type(rule).model_fields["check"].description or rule.check
    settings = [f"{name}: {_plain(value)}" for name, value in rule
                if name not in ("check", "description") and _plain(value)]
    return f"{described} ({'; '.join(settings)})" if settings else described


def _plain(value: Any) -> str:
    """A setting as a few words (a name, a number, a list of names), or "" for a structured one."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, tuple | list) and 0 < len(value) <= PLAIN_ITEMS and all(isinstance(item, str | int)
                                                                                 for item in value):
        return ", ".join(str(item) for item in value)
    return ""


def capped(messages: list[str], limit: int = MESSAGES_PER_RULE) -> list[str]:
    """The first ``limit`` messages, and one that counts the rest: a log with a fault on every line
    makes a report of a few lines, not one line per fault."""
    if len(messages) <= limit:
        return list(messages)
    return [*messages[:limit], f"... and {len(messages) - limit} more (only the first {limit} are listed)"]


def _attach_result(evidence: Evidence, path: Path) -> str | None:
    """The result beside the log into the evidence; a problem message, or None. A result that is
    not one is left out, so the rules that need it skip as they do without a result."""
    if not path.is_file():
        return None
    try:
        evidence.result = read_run_result(path.read_bytes().decode("utf-8", errors="replace"))
    except OSError as error:
        raise UnreadableFile(path, error) from None
    except ResultProblem as problem:
        return f"{path.name}: {problem}"
    return None


def _attach_config(evidence: Evidence, path: Path) -> str | None:
    """The run's configuration beside the log into the evidence, as a mapping (the checks read
    it leniently: it may come from another version); a problem message, or None."""
    if not path.is_file():
        return None
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        raise UnreadableFile(path, error) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        return f"{path.name} is not valid JSON: {str(error)[:100]}"
    if not isinstance(data, dict):
        return f"{path.name} is not a JSON object"
    evidence.config = data
    return None


def _registered_workload(evidence: Evidence, workloads: Mapping[str, WorkloadSpec]) -> dict[str, Any] | None:
    name = evidence.value_of(constants.SUBMISSION_BENCHMARK)
    spec = workloads.get(name) if isinstance(name, str) else None
    return None if spec is None else spec.model_dump(mode="json")


def _logs_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    from benchbase.sweeps.folder import configuration_folders  # the sweep planner loads only for a sweep

    # A sweep's folder holds one folder per configuration, each with its run folders: `check`
    # reads it as `score` and `report` do.
    members = configuration_folders(path) or [path]
    logs = [log for member in members for folder in find_run_folders(member)
            if (log := RunFolder(folder).compliance_log).is_file()]
    if not logs:
        raise InputError(f"{path}: no {LOG_NAME} in it, in its run folders or in a sweep's configurations")
    return logs
