"""What the RCP rule needs of a run folder, read from its compliance log: epochs to each target, the
global batch size, the workload, the division, the seed and the pinned hyperparameters.

The epochs are recomputed from the log's evaluations with the TTA rule (compliance.tta_check), never
taken from result.json's claim: an RCP judges convergence, and the log is the evidence the checker
holds a run to. A target the log never reaches is None here, "not converged" to the rule.

Run folders are found and grouped the way `benchbase score` does (report.load_groups): a run folder,
a folder of runs, or a sweep's folder (one group per configuration).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from benchbase.compliance import keys
from benchbase.compliance.evidence import same_value
from benchbase.compliance.keys import constants
from benchbase.compliance.parse import ParsedLog, read_log
from benchbase.compliance.tta_check import recompute_tta
from benchbase.errors import InputError, describe_validation_error
from benchbase.report.runs import Run, RunGroup
from benchbase.run_folder import RunFolder
from benchbase.specs import TTARule
from benchbase.specs.overrides import MISSING, field_at

__all__ = ["EVALUATION_KEYS", "RunConvergence", "differing_hyperparameters", "logged_hyperparameters",
           "read_convergence", "run_tta_rule"]

EVALUATION_KEYS = (keys.EVAL_DECODER, keys.EVAL_BEAM_WIDTH, keys.EVAL_LM_MODE, keys.EVAL_LM_ALPHA, keys.EVAL_LM_BETA,
                   keys.TTA_SUBSET, constants.GRADIENT_ACCUMULATION_STEPS)
"""Beside every opt_* key, what decides how many epochs a run needs to reach a target: how it is
evaluated, on which subset, and how many batches make a step."""


@dataclass(frozen=True)
class RunConvergence:
    """One run as the RCP rule sees it."""

    run: Run
    name: str
    """GROUP/RUN_FOLDER, as the RCP file and the tables name it."""
    log_path: Path
    workload: str | None
    division: str | None
    seed: int | None
    global_batch: int | None
    status: str | None
    """run_stop's status (success, aborted), None when the log has no run_stop."""
    hyperparameters: dict[str, Any]
    rule: TTARule
    """The TTA rule the epochs were recomputed with."""
    epochs: dict[str, int | None]
    """Target label -> the epoch whose evaluation first reached it; None: never reached."""

    @property
    def backend(self) -> str | None:
        backend = self.run.config.get("backend") or self.run.result.backend
        return backend if isinstance(backend, str) else None

    @property
    def revision(self) -> tuple[str | None, str | None, bool | None]:
        """benchbase's (version, commit, dirty) as config.json's environment records it."""
        source = (self.run.config.get("environment") or self.run.result.environment or {}).get("benchbase") or {}
        return source.get("version"), source.get("commit"), source.get("dirty")

    def missed(self) -> list[str]:
        return [label for label, epoch in self.epochs.items() if epoch is None]

    def require_closed(self) -> None:
        """Only closed-division runs make or meet an RCP: an open run changed what converges."""
        if self.division != constants.CLOSED:
            stated = "states no division" if self.division is None else f"is in the {self.division} division"
            raise InputError(f"{self.log_path}: the run {stated}; only closed-division runs (the registered "
                             "workload but for its run choices) make or meet an RCP")


def run_tta_rule(run: Run) -> TTARule:
    """The TTA rule the run was scored with (config.json), its subset filled in from the log's
    benchbase_tta_subset or the first dev subset where the rule leaves it out."""
    config = RunFolder(run.path).config
    workload = run.config.get("workload")
    source = field_at(workload, "tta")
    if source is MISSING:
        raise InputError(f"{config}: no workload.tta: the run's targets are unknown")
    try:
        rule = TTARule.model_validate(source)
    except ValidationError as error:
        raise InputError(describe_validation_error(f"{config}: workload.tta", error)) from None
    if rule.subset is None:
        dev = field_at(workload, "data.dev")
        subset = dev[0] if isinstance(dev, list) and dev and isinstance(dev[0], str) else None
        rule = rule.model_copy(update={"subset": subset})
    return rule


def read_convergence(group: RunGroup, run: Run, rule: TTARule | None = None) -> RunConvergence:
    """``run`` of ``group`` with its epochs to each target of ``rule`` (default: the run's own rule)."""
    rule = rule or run_tta_rule(run)
    path = RunFolder(run.path).compliance_log
    try:
        log = read_log(path)
    except OSError as error:
        raise InputError(f"{path}: cannot read the compliance log: {error.strerror or error}") from None
    reached = recompute_tta(log, rule, rule.subset or _value(log, keys.TTA_SUBSET))
    stop = log.first(constants.RUN_STOP)
    return RunConvergence(
        run=run, name=_run_name(group, run), log_path=path,
        workload=_text(_value(log, constants.SUBMISSION_BENCHMARK)),
        division=_text(_value(log, constants.SUBMISSION_DIVISION)), seed=_integer(_value(log, constants.SEED)),
        global_batch=_integer(_value(log, constants.GLOBAL_BATCH_SIZE)),
        status=None if stop is None else _text(stop.metadata.get(constants.STATUS)),
        hyperparameters=logged_hyperparameters(log), rule=rule,
        epochs={label: None if found is None else found[1] for label, found in reached.items()})


def differing_hyperparameters(stated: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """'key: stated -> expected' for each hyperparameter where a run's log departs from ``expected``."""
    found = []
    for key in sorted(set(stated) | set(expected)):
        mine, theirs = stated.get(key, MISSING), expected.get(key, MISSING)
        if not same_value(mine, theirs):
            found.append(f"{key} {'missing' if mine is MISSING else repr(mine)} (expected "
                         f"{'nothing' if theirs is MISSING else repr(theirs)})")
    return found


def _run_name(group: RunGroup, run: Run) -> str:
    folder = group.folder or group.name
    return run.path.name if folder == run.path.name else f"{folder}/{run.path.name}"


def logged_hyperparameters(log: ParsedLog) -> dict[str, Any]:
    """Every opt_* key and the evaluation's keys, first value each: what an RCP compares."""
    found: dict[str, Any] = {}
    for event in log.events:
        if (event.key.startswith("opt_") or event.key in EVALUATION_KEYS) and event.key not in found:
            found[event.key] = event.value
    return dict(sorted(found.items()))


def _value(log: ParsedLog, key: str) -> Any:
    event = log.first(key)
    return None if event is None else event.value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
