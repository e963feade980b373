"""Where each run's wall time went: a table of the groups' mean fractions and a figure of one
stacked bar per run (result.json's ``time_breakdown``; benchbase.harness.time_breakdown).

A run whose backend times no step phases shows its steps as one "step" part and says "not
reported"; a run recorded before the breakdown existed has no bar and says so."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt

from benchbase.report.figure_parts import save
from benchbase.report.report_table import ReportTable
from benchbase.report.runs import Run, RunGroup
from benchbase.specs.result import STAGES_NOT_REPORTED, TIME_PARTS

__all__ = ["FIGURE_STEM", "TABLE_NAME", "any_breakdown", "draw_time_breakdown", "time_breakdown_figure",
           "time_breakdown_table"]

TABLE_NAME = "time-breakdown"
FIGURE_STEM = "time-breakdown"
NOT_RECORDED = "not recorded"


def time_breakdown_table(groups: list[RunGroup]) -> ReportTable:
    """Per group, each part's mean share of the wall time (%) over the runs that recorded one."""
    rows = []
    for group in groups:
        recorded = [run.result.time_breakdown for run in group.runs if run.result.time_breakdown]
        shares = [None if not recorded else
                  100 * sum(breakdown["fractions"].get(part, 0.0) for breakdown in recorded) / len(recorded)
                  for part in TIME_PARTS]
        rows.append([group.shown_name, *shares, _phases(recorded)])
    return ReportTable("where the wall time went (% of the run clock, mean over runs)",
                       ["group", *(part.replace("_", " ") for part in TIME_PARTS), "step phases"], rows, digits=1,
                       name=TABLE_NAME,
                       notes=["host to device, forward, backward, optimizer: the step's phases as the backend "
                              "timed them (CUDA events on a GPU); step: the rest of the steps' wall time, all of "
                              f"it where the phases are {STAGES_NOT_REPORTED}; other: what no part covers (the "
                              "build, logging, sentences decoded during training)."])


def any_breakdown(groups: list[RunGroup]) -> bool:
    """Whether any run of the groups recorded where its time went (older runs did not)."""
    return any(run.result.time_breakdown for group in groups for run in group.runs)


def time_breakdown_figure(groups: list[RunGroup], path: Path) -> Path:
    return save(draw_time_breakdown(groups), path)


def draw_time_breakdown(groups: list[RunGroup]):
    """One horizontal bar per run, its parts stacked left to right in ``TIME_PARTS``' order."""
    runs = [(f"{group.shown_name} #{index}", run) for group in groups for index, run in enumerate(group.runs, 1)]
    figure, axis = plt.subplots(figsize=(10, 1.2 + 0.45 * max(len(runs), 1)))
    colors = plt.get_cmap("tab10").colors
    for part_index, part in enumerate(TIME_PARTS):
        widths = [100 * _fractions(run).get(part, 0.0) for _, run in runs]
        lefts = [100 * sum(_fractions(run).get(earlier, 0.0) for earlier in TIME_PARTS[:part_index])
                 for _, run in runs]
        axis.barh(range(len(runs)), widths, left=lefts, color=colors[part_index % len(colors)],
                  label=part.replace("_", " "))
    axis.set_yticks(range(len(runs)), [_label(name, run) for name, run in runs], fontsize=8)
    axis.invert_yaxis()  # the first run on top, as the table lists it
    axis.set_xlim(0, 100)
    axis.set_xlabel("% of the run's wall time")
    axis.legend(fontsize=7, ncols=len(TIME_PARTS), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    figure.tight_layout()
    return figure


def _fractions(run: Run) -> dict[str, float]:
    return run.result.time_breakdown.get("fractions", {})


def _label(name: str, run: Run) -> str:
    breakdown = run.result.time_breakdown
    if not breakdown:
        return f"{name} ({NOT_RECORDED})"
    return name if breakdown["stages"] == "reported" else f"{name} (phases {breakdown['stages']})"


def _phases(recorded: list[dict]) -> str:
    if not recorded:
        return NOT_RECORDED
    said = sorted({breakdown["stages"] for breakdown in recorded})
    return ", ".join(said)
