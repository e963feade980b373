"""MLPerf's RCP rule on a package's result set (results/SYSTEM/WORKLOAD): benchbase.rcp's rule on
the epochs recomputed from the result files alone, as MLPerf's rcp_checker reads a results folder.

A package holds no config.json or result.json, so this reads what benchbase.rcp.runs reads of a
run folder from the log only, and refuses (InputError) what `benchbase rcp check` refuses: another
workload, an open-division run, hyperparameters other than the reference's, several batch sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchbase.compliance import keys
from benchbase.compliance.keys import constants
from benchbase.compliance.parse import ParsedLog
from benchbase.compliance.tta_check import recompute_tta
from benchbase.errors import InputError
from benchbase.packaging.runs import log_value
from benchbase.rcp.checking import target_phrase
from benchbase.rcp.points import RcpFile, bundled_rcp, load_rcp
from benchbase.rcp.rule import Verdict, judge
from benchbase.rcp.runs import differing_hyperparameters, logged_hyperparameters

__all__ = ["SetVerdicts", "judge_result_set", "shipped_rcp"]


@dataclass(frozen=True)
class SetVerdicts:
    """A result set's verdict for each target of an RCP file."""

    source: str
    batch: int
    verdicts: dict[str, Verdict]

    @property
    def passed(self) -> bool:
        return all(verdict.passed for verdict in self.verdicts.values())


def shipped_rcp(workload: str) -> tuple[RcpFile, str] | None:
    """The RCP file that ships with benchbase for ``workload``, and where it was read from."""
    found = bundled_rcp(workload)
    return None if found is None else (load_rcp(found), str(found))


def judge_result_set(logs: list[tuple[Path, ParsedLog]], rcp: RcpFile, source: str) -> SetVerdicts:
    """The verdicts on the runs whose logs are ``logs``; InputError where a run cannot meet the RCP."""
    epochs: list[dict[str, int | None]] = []
    batches = set()
    for path, log in logs:
        batches.add(_comparable_batch(path, log, rcp, source))
        reached = recompute_tta(log, rcp.tta, rcp.tta.subset or log_value(log, keys.TTA_SUBSET))
        epochs.append({label: None if found is None else found[1] for label, found in reached.items()})
    if len(batches) != 1:
        raise InputError(f"{logs[0][0].parent}: its runs trained at global batch sizes {sorted(batches)}; a set of "
                         "runs meets an RCP at one batch size")
    batch = batches.pop()
    verdicts = {target.label: judge(rcp.points(target.label), batch, [run[target.label] for run in epochs],
                                    rcp.submission_runs, target_phrase(target)) for target in rcp.tta.targets}
    return SetVerdicts(source, batch, verdicts)


def _comparable_batch(path: Path, log: ParsedLog, rcp: RcpFile, source: str) -> int:
    """The run's global batch size, once it is known to be comparable with the reference."""
    workload = log_value(log, constants.SUBMISSION_BENCHMARK)
    if workload != rcp.workload:
        raise InputError(f"{path}: a run of workload {workload!r}, but {source} holds the RCPs of {rcp.workload!r}")
    division = log_value(log, constants.SUBMISSION_DIVISION)
    if division != constants.CLOSED:
        raise InputError(f"{path}: a run of the {division} division; only closed-division runs meet an RCP")
    differences = differing_hyperparameters(logged_hyperparameters(log), rcp.hyperparameters)
    if differences:
        raise InputError(f"{path}: the log's hyperparameters differ from the reference's ({source}): "
                         f"{'; '.join(differences[:4])}")
    batch = log_value(log, constants.GLOBAL_BATCH_SIZE)
    if not isinstance(batch, int) or isinstance(batch, bool):
        raise InputError(f"{path}: no global_batch_size in the log")
    return batch

