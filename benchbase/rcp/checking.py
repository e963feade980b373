"""Holding groups of runs to an RCP file (`benchbase rcp check`, and the RCP column of `benchbase score`).

A group is what `benchbase score` scores together (a folder of seeded runs, a sweep's
configuration). Its runs are recomputed with the RCP's own TTA rule, so every group is measured
to the same targets as the reference was, whatever the run's config.json says. A group is judged
only when it is comparable with the reference at all: closed division, the RCP's workload, the
same pinned hyperparameters, one batch size. Anything else is bad input (InputError naming the
run), not a verdict: the rule says nothing about a run that trained something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchbase.errors import InputError
from benchbase.rcp.points import RcpFile, bundled_rcp, load_rcp
from benchbase.rcp.rule import Verdict, judge
from benchbase.rcp.runs import differing_hyperparameters, read_convergence
from benchbase.report.runs import RunGroup
from benchbase.specs import Target

__all__ = ["GroupJudgement", "GroupRcp", "group_workload", "judge_group", "rcp_for", "rcp_of_groups",
           "target_phrase", "verdict_json"]


@dataclass(frozen=True)
class GroupJudgement:
    """One group's verdicts, target by target, against one RCP file."""

    group: RunGroup
    rcp: RcpFile
    source: str
    """Where the RCP file was read from."""
    batch: int
    verdicts: dict[str, Verdict]
    """Target label -> verdict, in the RCP's target order."""

    @property
    def passed(self) -> bool:
        return all(verdict.passed for verdict in self.verdicts.values())


@dataclass(frozen=True)
class GroupRcp:
    """What `benchbase score` shows of a group's RCP: its judgement, or why it has none."""

    judgement: GroupJudgement | None
    note: str | None = None
    source: str | None = None


def target_phrase(target: Target) -> str:
    """The target as the rule's sentences say it: ``paper_cer<=25``."""
    return f"{target.metric}<={target.value:g}"


def group_workload(group: RunGroup) -> str | None:
    """The workload the group's first run names (config.json, else result.json)."""
    first = group.runs[0]
    workload = first.config.get("workload")
    name = (workload.get("name") if isinstance(workload, dict) else None) or first.result.workload
    return name if isinstance(name, str) else None


def rcp_for(group: RunGroup, path: Path | None) -> tuple[RcpFile, str]:
    """The RCP file at ``path``, else the one that ships for the group's workload."""
    if path is not None:
        return load_rcp(path), str(path)
    workload = group_workload(group)
    found = None if workload is None else bundled_rcp(workload)
    if found is None:
        raise InputError(f"{group.name}: no RCP ships with benchbase for workload {workload!r}; name one with --rcp "
                         "FILE (`benchbase rcp make` writes it)")
    return load_rcp(found), str(found)


def judge_group(group: RunGroup, rcp: RcpFile, source: str) -> GroupJudgement:
    """The group's verdict for each of the RCP's targets; InputError where its runs cannot meet the RCP."""
    runs = [read_convergence(group, run, rcp.tta) for run in group.runs]
    for run in runs:
        if run.workload != rcp.workload:
            raise InputError(f"{run.log_path}: a run of workload {run.workload!r}, but {source} holds the RCPs of "
                             f"{rcp.workload!r}")
        run.require_closed()
        differences = differing_hyperparameters(run.hyperparameters, rcp.hyperparameters)
        if differences:
            raise InputError(f"{run.log_path}: the log's hyperparameters differ from the reference's ({source}): "
                             f"{'; '.join(differences[:4])}")
        if run.global_batch is None:
            raise InputError(f"{run.log_path}: no global_batch_size in the log")
    batches = sorted({run.global_batch for run in runs if run.global_batch is not None})
    if len(batches) > 1:
        raise InputError(f"{group.name}: its runs trained at global batch sizes {batches}; a set of runs meets an "
                         "RCP at one batch size")
    verdicts = {target.label: judge(rcp.points(target.label), batches[0], [run.epochs[target.label] for run in runs],
                                    rcp.submission_runs, target_phrase(target)) for target in rcp.tta.targets}
    return GroupJudgement(group, rcp, source, batches[0], verdicts)


def rcp_of_groups(groups: list[RunGroup]) -> dict[str, GroupRcp]:
    """Group name -> its RCP verdicts against the RCP that ships for its workload, or why there are none.
    Never raises on a group's content: `benchbase score` scores what it can and says what it could not."""
    found: dict[str, GroupRcp] = {}
    for group in groups:
        workload = group_workload(group)
        bundled = None if workload is None else bundled_rcp(workload)
        if bundled is None:
            found[group.name] = GroupRcp(None, f"no RCP for workload {workload}")
            continue
        try:
            rcp = load_rcp(bundled)
            found[group.name] = GroupRcp(judge_group(group, rcp, str(bundled)), source=str(bundled))
        except InputError as error:
            found[group.name] = GroupRcp(None, str(error), str(bundled))
    return found


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {"passed": verdict.passed, "case": str(verdict.case), "batch": verdict.batch,
            "rcp_mean": verdict.rcp_mean, "rcp_stdev": verdict.rcp_stdev, "min_epochs": verdict.min_epochs,
            "max_speedup": verdict.max_speedup,
            "reference_runs": None if verdict.point is None else verdict.point.runs,
            "interpolated_between": None if verdict.point is None or verdict.point.between is None
            else list(verdict.point.between),
            "submission_mean": verdict.submission_mean, "epochs": list(verdict.epochs),
            "norm_factor": verdict.norm_factor, "explanation": verdict.explanation}
