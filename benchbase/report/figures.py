"""The paper's figures from run folders, as PNG files (matplotlib, no display needed).

Figure 7: training loss (Gaussian-smoothed, sigma 10 batches), CER and WER over time, all on
  log axes labelled over the data's range; the scored subset solid, the other dev subsets
  lighter; the median of the last e evaluations (the TTA rule's aggregate) dotted; the
  workload's targets as dashed lines and a star where each run reached each target.
Figure 8: CPU utilization and each GPU's utilization over a 25-second window of the run, as
  1-second means with the raw samples' range shaded, the thread budget and the evaluations
  marked (benchbase.report.utilization_figure).
Figure 9: training throughput over time.
Figure 10: training throughput per run group as bars, for the groups that share a global batch
  size (drawn only where two or more do: one bar compares nothing); the bars and their labels are
  the throughput table's numbers (benchbase.report.throughput).

A report over runs of several workloads draws each figure once per workload (FILE-WORKLOAD.png):
a workload's targets and curves never share an axis with another workload's.
The performance profile (benchbase.report.profile_figure) is the one figure across workloads,
drawn where the groups ran two or more: each submitter's fraction of the workloads within tau
times the fastest.

Each figure has a draw_* function that returns the matplotlib figure (so tests can inspect
its axes) and a *_figure function that draws it and writes the PNG.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt
from scipy.ndimage import gaussian_filter1d

from benchbase.report.accuracy_marks import (
    CER_METRICS,
    TargetMarks,
    eval_value,
    metric_name,
    subset_series,
    targets,
)
from benchbase.report.figure_parts import (
    WARMUP_BATCHES,
    colored,
    label_log_axis,
    minutes,
    movable,
    note_if_empty,
    outside_legend,
    positive,
    save,
    separate_labels,
)
from benchbase.report.profile_figure import performance_profile_figure
from benchbase.report.profile_table import across_workloads
from benchbase.report.runs import Run, RunGroup, groups_by_shared_batch, groups_by_workload, loss_name
from benchbase.report.throughput import group_throughput, throughput_text
from benchbase.report.time_breakdown import FIGURE_STEM as TIME_FIGURE
from benchbase.report.time_breakdown import any_breakdown, time_breakdown_figure
from benchbase.report.utilization_figure import (
    SMOOTHING_SECONDS,
    UTILIZATION_WINDOW_SECONDS,
    draw_utilization,
    utilization_window,
)

__all__ = [
    "LOSS_SIGMA_BATCHES", "SMOOTHING_SECONDS", "UTILIZATION_WINDOW_SECONDS", "WARMUP_BATCHES", "accuracy_figure",
    "draw_accuracy", "draw_same_batch_throughput", "draw_throughput", "draw_utilization",
    "same_batch_figure", "same_batch_groups", "smooth_loss", "throughput_figure", "utilization_figure",
    "utilization_window", "write_figures",
]

LOSS_SIGMA_BATCHES = 10.0  # the paper smooths Figure 7's training loss with a Gaussian of sigma 10 batches
ROLLING_BATCHES = 25  # Figure 9's rolling median, only there to make a noisy per-batch series readable
OTHER_SUBSET_ALPHA = 0.35  # the subsets TTA is not scored on: there for context, drawn behind the scored one


def write_figures(groups: list[RunGroup], out: Path, window: tuple[float, float] | None = None) -> list[Path]:
    """Write the figures into out, one set per workload; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    by_workload = groups_by_workload(groups)
    paths = []
    for workload, members in by_workload.items():
        suffix = f"-{_file_part(workload)}" if len(by_workload) > 1 else ""
        paths += [accuracy_figure(members, out / f"accuracy-over-time{suffix}.png"),
                  utilization_figure(members, out / f"utilization{suffix}.png", window),
                  throughput_figure(members, out / f"throughput-over-time{suffix}.png")]
        if any_breakdown(members):  # runs recorded before the breakdown existed have none to draw
            paths.append(time_breakdown_figure(members, out / f"{TIME_FIGURE}{suffix}.png"))
        shared = same_batch_groups(members)
        if shared:  # a bar chart of one group compares nothing
            paths.append(same_batch_figure(shared, out / f"throughput-same-batch{suffix}.png"))
    across = across_workloads(groups)
    if across is not None and not across.problem:
        paths.append(performance_profile_figure(across, out / "performance-profile.png"))
    return paths


def _file_part(workload: str) -> str:
    return "".join(char if char.isalnum() or char in "-_." else "_" for char in workload) or "_"


def _one_workload(groups: list[RunGroup]) -> str:
    """The workload every group ran; a figure of several would set one workload's runs against
    another's targets (write_figures draws one figure per workload)."""
    names = list(groups_by_workload(groups))
    if len(names) > 1:
        raise ValueError(f"one figure draws one workload's runs, not {', '.join(names)}")
    return names[0] if names else ""


def _workload_title(groups: list[RunGroup], title: str) -> str:
    workload = _one_workload(groups)
    return f"{workload}: {title}" if workload else title


def accuracy_figure(groups: list[RunGroup], path: Path) -> Path:
    return save(draw_accuracy(groups), path)


def utilization_figure(groups: list[RunGroup], path: Path, window: tuple[float, float] | None = None) -> Path:
    return save(draw_utilization(groups, window), path)


def throughput_figure(groups: list[RunGroup], path: Path) -> Path:
    return save(draw_throughput(groups), path)


def same_batch_figure(groups: list[RunGroup], path: Path) -> Path:
    return save(draw_same_batch_throughput(groups), path)


# Figure 7 ---------------------------------------------------------------------------------------

def draw_accuracy(groups: list[RunGroup]):
    """Figure 7: loss, CER and WER panels over the run clock, each on a log y axis (one workload's runs)."""
    _one_workload(groups)
    figure, (loss, cer, wer) = plt.subplots(3, 1, sharex=True, figsize=(11, 10))
    cer_metric = _cer_metric(groups)
    panels = {cer_metric: cer, "wer": wer}
    windows = set()
    for color, group in colored(groups):
        marks = TargetMarks(group, panels)
        windows.add(marks.window)
        for index, run in enumerate(group.runs):
            label = _label(group) if index == 0 else None  # one legend entry per group, not per run
            _plot_loss(loss, run, color, label)
            for metric, axis in panels.items():
                _plot_eval(axis, run.evaluations, metric, color, label)
            marks.draw(run, color, label)
    _target_lines(cer, wer, groups)
    _finish_accuracy_axes(figure, (loss, cer, wer), groups, cer_metric, windows)
    figure.tight_layout()  # the labels are set apart where the figure will draw them
    separate_labels(figure)
    return figure


def _finish_accuracy_axes(figure, axes, groups: list[RunGroup], cer_metric: str, windows: set) -> None:
    loss, cer, wer = axes
    subset, others = _subset_names(groups), _other_subsets(groups)
    # The panels draw every dev subset: the label names the scored one and the fainter others.
    on = f" on {subset}" if subset else ""
    on += f" ({', '.join(others)} faint)" if others else ""
    loss_label = loss_name([run for group in groups for run in group.runs])
    names = ((loss, loss_label), (cer, f"{metric_name(cer_metric)} (%){on}"), (wer, f"WER (%){on}"))
    for axis, name in names:
        axis.set_ylabel(name)
        axis.set_yscale("log")  # the paper's Figure 7: error rates and loss fall over decades
        label_log_axis(axis)
        axis.grid(alpha=0.3, which="both")
        note_if_empty(axis, f"no {name.split(' (')[0]} in the runs' records")
        outside_legend(axis)
    wer.set_xlabel("run clock (minutes)")
    figure.suptitle(_workload_title(groups, f"loss, {metric_name(cer_metric)} and WER over time; targets dashed;\na "
                                            f"star marks TTA: the first evaluation whose {_window_text(windows)} "
                                            "is at or below the target"), fontsize=10)


def _window_text(windows: set) -> str:
    known = sorted(window for window in windows if window)
    if len(known) == 1:
        return f"median of the last {known[0]} evaluations"
    return "median of the last e evaluations"


def smooth_loss(values: list[float], sigma: float = LOSS_SIGMA_BATCHES) -> list[float]:
    """Gaussian smoothing over batches; edges repeat the end value so the curve does not bend at them."""
    if not values:
        return []
    return gaussian_filter1d([float(value) for value in values], sigma=sigma, mode="nearest").tolist()


def _plot_loss(axis, run: Run, color: str, label: str | None) -> None:
    # Raw loss faintly, the smoothed loss solid: the trend the paper plots, without hiding the noise.
    batches = [batch for batch in run.batches if positive(batch.get("loss"))]
    values = [batch["loss"] for batch in batches]
    axis.plot(minutes(batches), values, color=color, alpha=0.15, lw=0.5)
    axis.plot(minutes(batches), smooth_loss(values), color=color, lw=1.2,
              label=label and f"{label}: training loss, Gaussian sigma {LOSS_SIGMA_BATCHES:g} batches")
    for subset, scored in subset_series(run.evaluations):
        _plot_validation_loss(axis, run.evaluations, subset, scored, color, label)


def _plot_validation_loss(axis, evaluations: list[dict], subset: str | None, scored: bool, color: str,
                          label: str | None) -> None:
    points = [(record.get("t", 0.0) / 60, value) for record in evaluations
              if positive(value := eval_value(record, "loss", None if scored else subset))]
    if points:  # new eval records carry each subset's loss; old ones do not
        axis.plot(*zip(*points, strict=True), "s", color=color, ms=4, mec="black", mew=0.5,
                  alpha=None if scored else OTHER_SUBSET_ALPHA,
                  label=label and f"{label}: validation loss{_subset_text(subset)}")


def _plot_eval(axis, evaluations: list[dict], metric: str, color: str, label: str | None) -> None:
    for subset, scored in subset_series(evaluations):
        points = [(record.get("t", 0.0) / 60, value) for record in evaluations
                  if positive(value := eval_value(record, metric, None if scored else subset))]
        if points:
            axis.plot(*zip(*points, strict=True), "o-" if scored else "^-", color=color, ms=3,
                      alpha=None if scored else OTHER_SUBSET_ALPHA, label=label and f"{label}{_subset_text(subset)}")


def _subset_text(subset: str | None) -> str:
    return f", {subset}" if subset else ""


def _cer_metric(groups: list[RunGroup]) -> str:
    # The CER panel shows the metric the targets are stated in, so the target lines mean what they say.
    return "paper_cer" if any(metric == "paper_cer" for metric, _ in targets(groups)) else "cer"


def _subset_names(groups: list[RunGroup]) -> str:
    """The subset TTA is scored on, from the eval records or else the workload's TTA rule; old runs name
    neither, and the axis labels then stay generic."""
    names = dict.fromkeys(record["subset"] for group in groups for run in group.runs for record in run.evaluations
                          if isinstance(record.get("subset"), str))
    names = names or dict.fromkeys(subset for group in groups
                                   if isinstance(subset := (group.workload.get("tta") or {}).get("subset"), str))
    return ", ".join(names)


def _other_subsets(groups: list[RunGroup]) -> list[str]:
    """The dev subsets the records hold besides the scored one (dev-other), drawn faint."""
    return list(dict.fromkeys(subset for group in groups for run in group.runs
                              for subset, scored in subset_series(run.evaluations) if not scored and subset))


def _target_lines(cer, wer, groups: list[RunGroup]) -> None:
    for metric, value in targets(groups):
        axis = cer if metric in CER_METRICS else wer
        axis.axhline(value, color="black", ls="--", lw=0.8)
        movable(axis.annotate(f"{metric_name(metric)} {value:g}", (0.005, value), xycoords=("axes fraction", "data"),
                              xytext=(0, 0), textcoords="offset points", fontsize=7, va="bottom"))


# Figure 9 ---------------------------------------------------------------------------------------

def draw_throughput(groups: list[RunGroup]):
    """Figure 9: per-batch training throughput over the run clock (one workload's runs)."""
    _one_workload(groups)
    figure, axis = plt.subplots(figsize=(8, 4))
    for color, group in colored(groups):
        for index, run in enumerate(group.runs):
            batches = run.batches
            values = [b.get("throughput") or 0.0 for b in batches]
            axis.plot(minutes(batches), values, color=color, alpha=0.15, lw=0.6)
            axis.plot(minutes(batches), _rolling_median(values), color=color, lw=1.2,
                      label=_label(group) if index == 0 else None)
    axis.set_xlabel("run clock (minutes)")
    axis.set_ylabel("utterances per second")
    axis.grid(alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7, loc="lower right")
    axis.set_title(_workload_title(groups, f"training throughput (faint: per batch; solid: median of "
                                           f"{ROLLING_BATCHES} batches)"), fontsize=10)
    return figure


def _rolling_median(values: list[float]) -> list[float]:
    return [statistics.median(values[max(0, index - ROLLING_BATCHES + 1): index + 1])
            for index in range(len(values))]


# Figure 10 --------------------------------------------------------------------------------------

def same_batch_groups(groups: list[RunGroup]) -> list[RunGroup]:
    """The groups Figure 10 compares: those that share a global batch with another group."""
    return [group for shared in groups_by_shared_batch(groups).values() for group in shared]


def draw_same_batch_throughput(groups: list[RunGroup]):
    """Figure 10: one bar per group, its training throughput (the throughput table's number, at its
    rounding); the title names the shared batch size."""
    _one_workload(groups)
    figure, axis = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) + 2), 4))
    values = [group_throughput(group) for group in groups]
    batches = [group.global_batch for group in groups]
    bars = axis.bar(range(len(groups)), [value or 0.0 for value in values], color=[c for c, _ in colored(groups)])
    axis.bar_label(bars, labels=[throughput_text(value) for value in values], fontsize=8)
    axis.set_xticks(range(len(groups)), [f"{group.name}\nbatch {_batch_text(size)}" for group, size in
                                         zip(groups, batches, strict=True)], fontsize=8)
    axis.set_ylabel("utterances per second")
    axis.grid(alpha=0.3, axis="y")
    axis.margins(y=0.12)  # room for the value labels above the tallest bar
    axis.set_title(_workload_title(groups, f"training throughput, median after {WARMUP_BATCHES} warm-up batches\n"
                                           f"({_batch_note(batches)})"), fontsize=10)
    return figure


def _batch_note(sizes: list[int | None]) -> str:
    # Throughput depends on the batch size; bars at different sizes do not compare platforms alone.
    distinct = sorted(set(sizes), key=lambda size: (size is None, size or 0))
    if len(distinct) == 1:
        return "global batch not recorded" if distinct[0] is None else f"all at global batch {distinct[0]}"
    return "batch sizes differ: " + ", ".join(_batch_text(size) for size in distinct)


def _batch_text(size: int | None) -> str:
    return "?" if size is None else str(size)


def _label(group: RunGroup) -> str:
    return group.name if len(group.runs) == 1 else f"{group.name} ({len(group.runs)} runs)"
