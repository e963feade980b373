"""The paper's figures from run folders, as PNG files (matplotlib, no display needed).

Figure 7: training loss (Gaussian-smoothed, sigma 10 batches), CER and WER over time, all on
  log axes, the workload's targets as dashed lines, the validation loss as markers.
Figure 8: CPU utilization and each GPU's utilization over a 25-second window of the run.
Figure 9: training throughput over time.
Figure 10: training throughput per run group as bars, to compare platforms at one batch size.

Each figure has a draw_* function that returns the matplotlib figure (so tests can inspect
its axes) and a *_figure function that draws it and writes the PNG.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import LogFormatter  # noqa: E402
from scipy.ndimage import gaussian_filter1d  # noqa: E402

from benchbase.atomic import atomic_write_bytes  # noqa: E402
from benchbase.report.runs import Run, RunGroup  # noqa: E402
from benchbase.specs.tta import METRIC_LABELS  # noqa: E402

__all__ = [
    "LOSS_SIGMA_BATCHES", "UTILIZATION_WINDOW_SECONDS", "WARMUP_BATCHES", "accuracy_figure", "batch_throughput",
    "draw_accuracy", "draw_same_batch_throughput", "draw_throughput", "draw_utilization", "same_batch_figure",
    "smooth_loss", "throughput_figure", "utilization_figure", "utilization_window", "write_figures",
]

DPI = 120
LOSS_SIGMA_BATCHES = 10.0  # the paper smooths Figure 7's training loss with a Gaussian of sigma 10 batches
UTILIZATION_WINDOW_SECONDS = 25.0  # the paper's Figure 8 shows 25 seconds of steady training
WARMUP_BATCHES = 5  # the first batches carry compilation and cache warm-up, not steady-state speed
ROLLING_BATCHES = 25  # Figure 9's rolling median, only there to make a noisy per-batch series readable
CER_METRICS = ("cer", "paper_cer")


def write_figures(groups: list[RunGroup], out: Path, window: tuple[float, float] | None = None) -> list[Path]:
    """Write the figures into out; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [accuracy_figure(groups, out / "accuracy-over-time.png"),
             utilization_figure(groups, out / "utilization.png", window),
             throughput_figure(groups, out / "throughput-over-time.png")]
    if groups:  # a bar chart of nothing says nothing
        paths.append(same_batch_figure(groups, out / "throughput-same-batch.png"))
    return paths


def accuracy_figure(groups: list[RunGroup], path: Path) -> Path:
    return _save(draw_accuracy(groups), path)


def utilization_figure(groups: list[RunGroup], path: Path, window: tuple[float, float] | None = None) -> Path:
    return _save(draw_utilization(groups, window), path)


def throughput_figure(groups: list[RunGroup], path: Path) -> Path:
    return _save(draw_throughput(groups), path)


def same_batch_figure(groups: list[RunGroup], path: Path) -> Path:
    return _save(draw_same_batch_throughput(groups), path)


# Figure 7 ---------------------------------------------------------------------------------------

def draw_accuracy(groups: list[RunGroup]):
    """Figure 7: loss, CER and WER panels over the run clock, each on a log y axis."""
    figure, (loss, cer, wer) = plt.subplots(3, 1, sharex=True, figsize=(8, 9))
    cer_metric = _cer_metric(groups)
    for color, group in _colored(groups):
        for index, run in enumerate(group.runs):
            label = _label(group, index)
            _plot_loss(loss, run, color, label)
            _plot_eval(cer, run.evaluations, cer_metric, color, label)
            _plot_eval(wer, run.evaluations, "wer", color, label)
    _target_lines(cer, wer, groups)
    subset = _subset_names(groups)
    on = f" on {subset}" if subset else ""
    names = ((loss, "CTC loss"), (cer, f"{_metric_name(cer_metric)} (%){on}"), (wer, f"WER (%){on}"))
    for axis, name in names:
        axis.set_ylabel(name)
        axis.set_yscale("log")  # the paper's Figure 7: error rates and loss fall over decades
        _plain_log_labels(axis)
        axis.grid(alpha=0.3, which="both")
        _note_if_empty(axis, f"no {axis.get_ylabel().split(' (')[0]} in the runs' records")
    loss.legend(handles=_loss_legend(groups, subset), fontsize=7, loc="upper right")
    wer.set_xlabel("run clock (minutes)")
    if cer.get_legend_handles_labels()[0]:
        cer.legend(fontsize=7, loc="upper right")
    figure.suptitle(f"loss, {_metric_name(cer_metric)} and WER over time (targets dashed)")
    return figure


def _plain_log_labels(axis) -> None:
    # "30" reads faster than "3 x 10^1" on an axis that often spans less than a decade.
    axis.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))


def smooth_loss(values: list[float], sigma: float = LOSS_SIGMA_BATCHES) -> list[float]:
    """Gaussian smoothing over batches; edges repeat the end value so the curve does not bend at them."""
    if not values:
        return []
    return gaussian_filter1d([float(value) for value in values], sigma=sigma, mode="nearest").tolist()


def _plot_loss(axis, run: Run, color: str, label: str) -> None:
    # Raw loss faintly, the smoothed loss solid: the trend the paper plots, without hiding the noise.
    batches = [batch for batch in run.batches if _positive(batch.get("loss"))]
    times = _minutes(batches)
    values = [batch["loss"] for batch in batches]
    axis.plot(times, values, color=color, alpha=0.15, lw=0.5)
    axis.plot(times, smooth_loss(values), color=color, lw=1.2, label=label)
    validation = [(record.get("t", 0.0) / 60, value) for record in run.evaluations
                  if _positive(value := _eval_value(record, "loss"))]
    if validation:  # new eval records carry the scored subset's CTC loss; old ones do not
        axis.plot(*zip(*validation, strict=True), "s", color=color, ms=4, mec="black", mew=0.5)


def _plot_eval(axis, evaluations: list[dict], metric: str, color: str, label: str) -> None:
    points = [(record.get("t", 0.0) / 60, value) for record in evaluations
              if _positive(value := _eval_value(record, metric))]
    if points:
        axis.plot(*zip(*points, strict=True), "o-", color=color, ms=3, label=label)


def _eval_value(record: dict, metric: str) -> float | None:
    """The scored subset's value: top level in every record format; new records also nest it by subset."""
    value = record.get(metric)
    if value is None:
        value = ((record.get("subsets") or {}).get(record.get("subset")) or {}).get(metric)
    return value


def _cer_metric(groups: list[RunGroup]) -> str:
    # The CER panel shows the metric the targets are stated in, so the target lines mean what they say.
    return "paper_cer" if any(metric == "paper_cer" for metric, _ in _targets(groups)) else "cer"


def _subset_names(groups: list[RunGroup]) -> str:
    """The subset TTA is scored on, from the eval records or else the workload's TTA rule; old runs name
    neither, and the axis labels then stay generic."""
    names = dict.fromkeys(record["subset"] for group in groups for run in group.runs for record in run.evaluations
                          if isinstance(record.get("subset"), str))
    names = names or dict.fromkeys(subset for group in groups
                                   if isinstance(subset := (group.workload.get("tta") or {}).get("subset"), str))
    return ", ".join(names)


def _target_lines(cer, wer, groups: list[RunGroup]) -> None:
    for metric, value in _targets(groups):
        axis = cer if metric in CER_METRICS else wer
        axis.axhline(value, color="black", ls="--", lw=0.8)
        axis.annotate(f"{_metric_name(metric)} {value:g}", (0.005, value), xycoords=("axes fraction", "data"),
                      fontsize=7, va="bottom")


def _targets(groups: list[RunGroup]) -> list[tuple[str, float]]:
    targets = {(str(target.get("metric")), float(target["value"])) for group in groups
               for target in (group.workload.get("tta") or {}).get("targets", [])
               if isinstance(target, dict) and _positive(target.get("value"))}
    return sorted(targets)


def _loss_legend(groups: list[RunGroup], subset: str) -> list[Line2D]:
    # Says what the line and the markers are; the colors are named in the CER panel's legend.
    handles = [Line2D([], [], color="gray", lw=1.2, label=f"training loss, Gaussian sigma {LOSS_SIGMA_BATCHES:g} batches")]
    if any(_positive(_eval_value(record, "loss")) for group in groups for run in group.runs for record in run.evaluations):
        handles.append(Line2D([], [], color="gray", marker="s", ls="", mec="black",
                              label=f"validation loss{f' ({subset})' if subset else ''}"))
    return handles


def _metric_name(metric: str) -> str:
    # The names the TTA tables use (paper_cer is "CER", jiwer's cer "CER/ref"), so figure and table agree.
    return METRIC_LABELS.get(metric, metric.upper())


# Figure 8 ---------------------------------------------------------------------------------------

def draw_utilization(groups: list[RunGroup], window: tuple[float, float] | None = None):
    """Figure 8: per group (its first run), CPU solid (the run's own processes dotted) and each GPU
    dashed over one window."""
    figure, axes = plt.subplots(len(groups) or 1, 1, figsize=(8, 1 + 2.4 * max(1, len(groups))), squeeze=False)
    for axis, group in zip(axes[:, 0], groups, strict=False):
        run = group.runs[0]
        span = window or utilization_window(run)
        _plot_utilization(axis, _in_window(run.telemetry, span))
        axis.set_xlim(*span)
        axis.set_title(group.name, fontsize=9, loc="left")
    for axis in axes[:, 0]:
        axis.set_ylabel("utilization (%)")
        axis.set_ylim(0, 105)
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("run clock (seconds)")
    which = (f"run clock {window[0]:g} to {window[1]:g} s" if window
             else f"{UTILIZATION_WINDOW_SECONDS:g} s after {WARMUP_BATCHES} warm-up batches")
    figure.suptitle(f"CPU and GPU utilization, {which} (first run of each group)")
    return figure


def utilization_window(run: Run) -> tuple[float, float]:
    """The default window: 25 s from the end of the warm-up batches, as in the paper's Figure 8;
    for a run that ends sooner, the last 25 s (or the whole run), so the window is never empty."""
    batches = run.batches
    start = batches[min(len(batches), WARMUP_BATCHES) - 1].get("t", 0.0) if batches else 0.0
    samples = [sample.get("t") for sample in run.telemetry if isinstance(sample.get("t"), int | float)]
    end = max(samples) if samples else start + UTILIZATION_WINDOW_SECONDS
    start = max(0.0, min(start, end - UTILIZATION_WINDOW_SECONDS))
    return start, start + UTILIZATION_WINDOW_SECONDS


def _plot_utilization(axis, samples: list[dict]) -> None:
    times = [sample["t"] for sample in samples]
    axis.plot(times, [sample.get("cpu") for sample in samples], color="black", lw=0.9, label="CPU")
    process_times, process_cpu = _process_cpu_series(samples)
    if process_times:  # telemetry written before the sampler followed the run's processes has none
        axis.plot(process_times, process_cpu, color="black", ls=":", lw=0.9, label="CPU, run's processes")
    gpu_series = _gpu_series(samples)
    for index, (gpu_times, util) in enumerate(gpu_series):
        axis.plot(gpu_times, util, ls="--", lw=0.9, label=f"GPU {index}")
    if not samples:
        axis.text(0.5, 0.5, "no telemetry in this window", ha="center", va="center", transform=axis.transAxes,
                  fontsize=8)
    # The sampler records no "gpus" without NVML; the legend says so rather than leave the reader guessing.
    # (In the legend, not on the plot: a busy CPU runs along the top where a note would cover it.)
    no_gpu = "no GPU utilization (NVML unavailable)" if not gpu_series else None
    axis.legend(fontsize=7, title=no_gpu, title_fontsize=7, loc="lower right", ncol=min(len(axis.lines), 5))


def _process_cpu_series(samples: list[dict]) -> tuple[list[float], list[float]]:
    """(times, CPU %) of the run's own processes, on the machine-wide scale of "cpu"."""
    points = [(sample["t"], sample["proc_cpu"]) for sample in samples if isinstance(sample.get("proc_cpu"), int | float)]
    return [t for t, _ in points], [cpu for _, cpu in points]


def _gpu_series(samples: list[dict]) -> list[tuple[list[float], list[float]]]:
    """One (times, utilization) series per GPU index; a sample missing a GPU's reading is skipped."""
    series: list[tuple[list[float], list[float]]] = []
    for sample in samples:
        for index, gpu in enumerate(sample.get("gpus") or []):
            while len(series) <= index:
                series.append(([], []))
            util = gpu.get("util") if isinstance(gpu, dict) else None
            if isinstance(util, int | float):
                series[index][0].append(sample["t"])
                series[index][1].append(util)
    return series


def _in_window(samples: list[dict], window: tuple[float, float]) -> list[dict]:
    start, end = window
    return [sample for sample in samples if isinstance(sample.get("t"), int | float) and start <= sample["t"] <= end]


# Figure 9 ---------------------------------------------------------------------------------------

def draw_throughput(groups: list[RunGroup]):
    """Figure 9: per-batch training throughput over the run clock."""
    figure, axis = plt.subplots(figsize=(8, 4))
    for color, group in _colored(groups):
        for index, run in enumerate(group.runs):
            batches = run.batches
            values = [b.get("throughput") or 0.0 for b in batches]
            axis.plot(_minutes(batches), values, color=color, alpha=0.15, lw=0.6)
            axis.plot(_minutes(batches), _rolling_median(values), color=color, lw=1.2, label=_label(group, index))
    axis.set_xlabel("run clock (minutes)")
    axis.set_ylabel("utterances per second")
    axis.grid(alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7, loc="lower right")
    axis.set_title(f"training throughput (faint: per batch; solid: median of {ROLLING_BATCHES} batches)")
    return figure


def _rolling_median(values: list[float]) -> list[float]:
    return [statistics.median(values[max(0, index - ROLLING_BATCHES + 1): index + 1])
            for index in range(len(values))]


# Figure 10 --------------------------------------------------------------------------------------

def draw_same_batch_throughput(groups: list[RunGroup]):
    """Figure 10: one bar per group, its training throughput; the title names the shared batch size."""
    figure, axis = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) + 2), 4))
    values = [batch_throughput(group) for group in groups]
    batches = [_global_batch(group) for group in groups]
    colors = [color for color, _ in _colored(groups)]
    positions = range(len(groups))
    bars = axis.bar(positions, [value or 0.0 for value in values], color=colors)
    axis.bar_label(bars, labels=[f"{value:.1f}" if value is not None else "no batches" for value in values],
                   fontsize=8)
    axis.set_xticks(list(positions), [f"{group.name}\nbatch {_batch_text(size)}" for group, size in
                                      zip(groups, batches, strict=True)], fontsize=8)
    axis.set_ylabel("utterances per second")
    axis.grid(alpha=0.3, axis="y")
    axis.margins(y=0.12)  # room for the value labels above the tallest bar
    axis.set_title(f"training throughput, median after {WARMUP_BATCHES} warm-up batches\n({_batch_note(batches)})",
                   fontsize=10)
    return figure


def batch_throughput(group: RunGroup) -> float | None:
    """Median over the group's runs of each run's median per-batch throughput after warm-up."""
    medians = [median for run in group.runs if (median := _run_throughput(run)) is not None]
    return statistics.median(medians) if medians else None


def _run_throughput(run: Run) -> float | None:
    batches = run.batches
    steady = batches[WARMUP_BATCHES:] or batches  # a run shorter than warm-up still has a number to show
    values = [value for batch in steady if _positive(value := batch.get("throughput"))]
    return statistics.median(values) if values else None


def _global_batch(group: RunGroup) -> int | None:
    size = (group.hardware.get("pipeline") or {}).get("global_batch")
    return size if isinstance(size, int) else None


def _batch_note(sizes: list[int | None]) -> str:
    # Throughput depends on the batch size; bars at different sizes do not compare platforms alone.
    distinct = sorted(set(sizes), key=lambda size: (size is None, size or 0))
    if len(distinct) == 1:
        return "global batch not recorded" if distinct[0] is None else f"all at global batch {distinct[0]}"
    return "batch sizes differ: " + ", ".join(_batch_text(size) for size in distinct)


def _batch_text(size: int | None) -> str:
    return "?" if size is None else str(size)


# shared -----------------------------------------------------------------------------------------

def _positive(value) -> bool:
    # Log axes cannot show zero, negative or missing values; nor can a median use NaN.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _note_if_empty(axis, message: str) -> None:
    if not any(len(line.get_xdata()) for line in axis.lines if line.get_linestyle() != "--"):
        axis.text(0.5, 0.5, message, ha="center", va="center", transform=axis.transAxes, fontsize=8)


def _minutes(records: list[dict]) -> list[float]:
    return [record.get("t", 0.0) / 60 for record in records]


def _label(group: RunGroup, index: int) -> str:
    return group.name if len(group.runs) == 1 else f"{group.name} #{index}"


def _colored(groups: list[RunGroup]):
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [(colors[index % len(colors)], group) for index, group in enumerate(groups)]


def _save(figure, path: Path) -> Path:
    figure.tight_layout()
    atomic_write_bytes(path, lambda handle: figure.savefig(handle, dpi=DPI, format="png"))
    plt.close(figure)
    return path
