"""Run groups of several workloads as AlgoPerf's performance profile: who the submitters are,
each one's time on each workload, and the tables and JSON that show them.

A submitter is a system and a framework: the hardware profile and the backend, and the precision
and the strategy where the groups differ in them (EXPERIMENT's fields but the workload). Its time
on a workload is the olympic score, over its runs, of each run's time to every target of the
workload (the time its TTA rule stops the run at; None for a run that missed one): AlgoPerf scores
a workload by its one target, and a benchbase workload's target is all of its targets. The
profile and the score follow benchbase.report.performance_profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchbase.report.performance_profile import (
    MAX_TAU,
    TAU_POINTS,
    benchmark_score,
    counted_ratio,
    performance_ratios,
    rho,
)
from benchbase.report.report_table import ReportTable
from benchbase.report.runs import EXPERIMENT, Run, RunGroup, groups_by_workload
from benchbase.report.scoring import OlympicScore, olympic_score

__all__ = ["PROFILE_TAUS", "AcrossWorkloads", "SubmitterProfile", "across_workloads", "every_target_seconds",
           "profile_json", "profile_tables", "workload_score"]

PROFILE_TAUS = (1.0, 1.5, 2.0, 3.0, 4.0)
"""The values of tau a table shows rho at (the figure draws the whole profile)."""
SUBMITTER_FIELDS = tuple(field for field in EXPERIMENT if field != "workload")
ALWAYS_NAMED = ("backend", "hardware profile")
"""A submitter's name always says these; the precision and the strategy where the groups differ in them."""


@dataclass(frozen=True)
class SubmitterProfile:
    name: str
    groups: dict[str, RunGroup]
    """Workload -> the submitter's group of runs of it (absent: no runs of that workload)."""
    scores: dict[str, OlympicScore]
    """Workload -> the olympic score of its runs' time to every target."""
    ratios: dict[str, float | None]
    """Workload -> time over the fastest submitter's (None: never reached, or no runs)."""

    @property
    def score(self) -> float:
        return benchmark_score(list(self.ratios.values()))

    def rho(self, tau: float) -> float:
        return rho(list(self.ratios.values()), tau)


@dataclass(frozen=True)
class AcrossWorkloads:
    workloads: list[str]
    submitters: list[SubmitterProfile]
    problem: str = ""
    """Why there is no profile ("" where there is one)."""


def every_target_seconds(run: Run, labels: list[str]) -> float | None:
    """When the run had reached every target: its last target's TTA; None where it missed one."""
    times = [run.tta_seconds(label) for label in labels]
    return None if not times or None in times else max(times)


def workload_score(group: RunGroup) -> OlympicScore:
    """The olympic score of the group's runs' times to every target (as `score` scores one target)."""
    return olympic_score([every_target_seconds(run, group.targets) for run in group.runs])


def across_workloads(groups: list[RunGroup]) -> AcrossWorkloads | None:
    """The profile of the groups' submitters; None for groups of one workload (nothing to aggregate)."""
    by_workload = groups_by_workload(groups)
    if len(by_workload) < 2:
        return None
    names = _submitter_names(groups)
    members: dict[str, dict[str, list[RunGroup]]] = {}
    for group in groups:
        members.setdefault(names[id(group)], {}).setdefault(group.workload_name, []).append(group)
    clash = next(((name, workload, found) for name, row in members.items() for workload, found in row.items()
                  if len(found) > 1), None)
    if clash:
        name, workload, found = clash
        return AcrossWorkloads(list(by_workload), [], f"No profile: {', '.join(g.name for g in found)} are all "
                               f"{name}'s {workload} runs, and a submitter has one time per workload; score one "
                               "group per submitter and workload.")
    scores = {name: {workload: workload_score(found[0]) for workload, found in row.items()}
              for name, row in members.items()}
    ratios = performance_ratios({name: {workload: scores[name].get(workload, _NO_RUNS).seconds
                                        for workload in by_workload} for name in members})
    return AcrossWorkloads(list(by_workload), [
        SubmitterProfile(name, {workload: found[0] for workload, found in row.items()}, scores[name], ratios[name])
        for name, row in members.items()])


_NO_RUNS = olympic_score([])


def _submitter_names(groups: list[RunGroup]) -> dict[int, str]:
    """id(group) -> its submitter's name: "BACKEND on PROFILE", then the precision and the strategy
    where the groups differ in them."""
    experiments = {id(group): group.experiment for group in groups}
    named = [field for field in SUBMITTER_FIELDS
             if field in ALWAYS_NAMED or len({experiment[field] for experiment in experiments.values()}) > 1]
    names = {}
    for key, experiment in experiments.items():
        extra = [experiment[field] for field in named if field not in ALWAYS_NAMED]
        names[key] = ", ".join([f"{experiment['backend']} on {experiment['hardware profile']}", *extra])
    return names


# Tables and JSON ---------------------------------------------------------------------------------------

def profile_tables(across: AcrossWorkloads) -> list[ReportTable]:
    """Each submitter's time and ratio per workload, then its profile and score."""
    if across.problem:
        return [ReportTable(PROFILE_TITLE, [], [], name="performance-profile", notes=[across.problem])]
    return [_ratio_table(across), _profile_table(across)]


PROFILE_TITLE = "performance profile across workloads (AlgoPerf's benchmark score)"


def _ratio_table(across: AcrossWorkloads) -> ReportTable:
    rows = [[submitter.name, workload, _group_name(submitter, workload),
             _minutes(submitter.scores.get(workload)), submitter.ratios[workload]]
            for submitter in across.submitters for workload in across.workloads]
    notes = ["minutes: the olympic score of each run's time to every target of the workload (its TTA for all of "
             "them: a benchbase workload's target is all its targets, where AlgoPerf's has one).",
             f"ratio: to the fastest submitter on the workload; NA: never reached (more than one run missed a "
             f"target) or no runs. A ratio beyond {MAX_TAU:g} counts as never in the profile."]
    return ReportTable("time to every target, per submitter and workload (minutes; ratio to the fastest)",
                       ["submitter", "workload", "group", "minutes", "ratio"], rows, name="performance-ratios",
                       notes=notes)


def _profile_table(across: AcrossWorkloads) -> ReportTable:
    count = len(across.workloads)
    rows = [[submitter.name, f"{_within(submitter)} of {count}", *(submitter.rho(tau) for tau in PROFILE_TAUS),
             submitter.score] for submitter in across.submitters]
    notes = [f"rho(tau): the fraction of the {count} workloads ({', '.join(across.workloads)}) the submitter reached "
             f"within tau times the fastest submitter's time; a miss, or a ratio beyond {MAX_TAU:g}, never counts.",
             f"score: the area under rho from tau 1 to {MAX_TAU:g} over {MAX_TAU - 1:g} (AlgoPerf's: the trapezoid "
             f"rule on {TAU_POINTS} linearly spaced taus); 1 is the fastest on every workload. MLPerf reports each "
             "workload's time alone and never aggregates them."]
    return ReportTable(PROFILE_TITLE, ["submitter", f"within {MAX_TAU:g}x",
                                       *(f"rho({tau:g})" for tau in PROFILE_TAUS), "score"],
                       rows, digits=3, name="performance-profile", notes=notes)


def _within(submitter: SubmitterProfile) -> int:
    return sum(math.isfinite(counted_ratio(ratio)) for ratio in submitter.ratios.values())


def _group_name(submitter: SubmitterProfile, workload: str) -> str:
    group = submitter.groups.get(workload)
    return "no runs" if group is None else group.shown_name


def _minutes(score: OlympicScore | None) -> float | None:
    return None if score is None else score.minutes


def profile_json(across: AcrossWorkloads) -> dict:
    """The profile for `score --json`: per submitter, each workload's group, seconds and ratio, rho at
    PROFILE_TAUS and the score (a ratio beyond MAX_TAU keeps its value; null: never reached)."""
    return {"workloads": across.workloads, "max_tau": MAX_TAU, "tau_points": TAU_POINTS, "problem": across.problem,
            "submitters": {submitter.name: {"workloads": {workload: _workload_json(submitter, workload)
                                                          for workload in across.workloads},
                                            "rho": {f"{tau:g}": submitter.rho(tau) for tau in PROFILE_TAUS},
                                            "score": submitter.score} for submitter in across.submitters}}


def _workload_json(submitter: SubmitterProfile, workload: str) -> dict:
    group, score, ratio = submitter.groups.get(workload), submitter.scores.get(workload), submitter.ratios[workload]
    return {"group": None if group is None else group.name, "seconds": None if score is None else score.seconds,
            "ratio": ratio if ratio is not None and math.isfinite(ratio) else None}
