"""Figure 8: CPU and GPU utilization over one window of a run (the first run of each group).

The sampler takes a sample every 30 ms, and at that interval the kernel's CPU accounting, in
10 ms ticks, makes a steady load read as a comb between two levels. The figure draws 1-second
means, with the range of the raw samples in each second shaded: the mean of equal intervals'
utilizations is the utilization over the second, where a median of a two-level comb would
jump between the levels.

What 100% means: the sampler's "cpu" and "proc_cpu" are percent of the whole machine (every
logical CPU busy); the right axis restates that as percent of the run's thread budget
(result.json's cpu.thread_budget: the threads the plan let the framework use). GPU
utilization is NVML's: the share of time a kernel ran on that GPU.
"""

from __future__ import annotations

import statistics

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt
import numpy as np

from benchbase.report.figure_parts import WARMUP_BATCHES
from benchbase.report.runs import Run, RunGroup

__all__ = ["SMOOTHING_SECONDS", "UTILIZATION_WINDOW_SECONDS", "draw_utilization", "logical_cpus", "rolling_band",
           "thread_budget", "utilization_window"]

UTILIZATION_WINDOW_SECONDS = 25.0  # the paper's Figure 8 shows 25 seconds of steady training
SMOOTHING_SECONDS = 1.0  # long enough to even out 10 ms accounting ticks, short enough to show a step's rhythm
# Red is the thread budget's and cyan the evaluations' shade; black and blue are the CPU's.
GPU_COLORS = ("tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:gray")
BUDGET_COLOR, EVALUATION_COLOR, RESUME_COLOR = "tab:red", "tab:cyan", "tab:purple"


def draw_utilization(groups: list[RunGroup], window: tuple[float, float] | None = None):
    """Figure 8: per group (its first run), CPU solid (the run's own processes dotted), each GPU
    dashed, the thread budget and the evaluations, over one window."""
    figure, axes = plt.subplots(len(groups) or 1, 1, figsize=(11, 1.4 + 2.8 * max(1, len(groups))), squeeze=False)
    intervals = []
    for axis, group in zip(axes[:, 0], groups, strict=False):
        run = group.runs[0]
        span = window or utilization_window(run)
        intervals.append(_plot_run(axis, run, span))
        axis.set_xlim(*span)
        axis.set_title(group.name, fontsize=9, loc="left")
    for axis in axes[:, 0]:
        axis.set_ylim(0, 105)
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("run clock (seconds)")
    workloads = sorted({group.workload_name for group in groups})
    figure.suptitle(_title(window, intervals, workloads), fontsize=10)
    return figure


def _title(window: tuple[float, float] | None, intervals: list[float | None], workloads: list[str]) -> str:
    which = (f"run clock {window[0]:g} to {window[1]:g} s" if window
             else f"{UTILIZATION_WINDOW_SECONDS:g} s after {WARMUP_BATCHES} warm-up batches")
    known = [interval for interval in intervals if interval]
    raw = f"raw {1000 * statistics.median(known):.0f} ms samples" if known else "raw samples"
    return (f"{', '.join(workloads) + ': ' if workloads else ''}CPU and GPU utilization, {which} "
            "(first run of each group)\n"
            f"lines: {SMOOTHING_SECONDS:g} s means; shaded: the range of the {raw} in each {SMOOTHING_SECONDS:g} s")


def utilization_window(run: Run) -> tuple[float, float]:
    """The default window: 25 s from the end of the warm-up batches, as in the paper's Figure 8;
    for a run that ends sooner, the last 25 s (or the whole run), so the window is never empty."""
    batches = run.batches
    start = batches[min(len(batches), WARMUP_BATCHES) - 1].get("t", 0.0) if batches else 0.0
    samples = [sample.get("t") for sample in run.telemetry if isinstance(sample.get("t"), int | float)]
    end = max(samples) if samples else start + UTILIZATION_WINDOW_SECONDS
    start = max(0.0, min(start, end - UTILIZATION_WINDOW_SECONDS))
    return start, start + UTILIZATION_WINDOW_SECONDS


def _plot_run(axis, run: Run, span: tuple[float, float]) -> float | None:
    """Draws one run's panel; returns the median interval between its samples (None without any)."""
    half = SMOOTHING_SECONDS / 2  # samples just outside the window still count in the means at its edges
    samples = _in_window(run.telemetry, (span[0] - half, span[1] + half))
    resumes = [at for at in getattr(run, "resumed_at", []) if span[0] < at <= span[1]]
    keys = [_plot_smoothed(axis, _series(samples, "cpu"), span, "black", "-", "CPU", resumes),
            _plot_smoothed(axis, _series(samples, "proc_cpu"), span, "tab:blue", ":", "CPU, run's processes",
                           resumes)]
    gpus = _gpu_series(samples)
    keys += [_plot_smoothed(axis, series, span, GPU_COLORS[index % len(GPU_COLORS)], "--", f"GPU {index}", resumes)
             for index, series in enumerate(gpus)]
    keys += [_resumes(axis, resumes), _budget(axis, run, samples), _evaluations(axis, run.evaluations, span)]
    notes = [note for note, missing in (("no GPU utilization (NVML unavailable)", not gpus),
                                        ("no evaluation in this window", keys[-1] is None)) if missing]
    _legend(axis, samples, [key for key in keys if key is not None], notes)
    times = [sample["t"] for sample in samples]
    return statistics.median(np.diff(times)) if len(times) > 1 else None


def rolling_band(times: list[float], values: list[float], seconds: float = SMOOTHING_SECONDS):
    """(mean, min, max) of the samples within seconds/2 of each sample's time, as arrays."""
    times_array, values_array = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    starts = np.searchsorted(times_array, times_array - seconds / 2, side="left")
    ends = np.searchsorted(times_array, times_array + seconds / 2, side="right")
    windows = [values_array[start:end] for start, end in zip(starts, ends, strict=True)]
    return tuple(np.array([reduce(window) for window in windows]) for reduce in (np.mean, np.min, np.max))


def _plot_smoothed(axis, series: tuple[list[float], list[float]], span: tuple[float, float], color: str, style: str,
                   label: str, resumes: list[float] = ()) -> tuple | None:
    """The rolling mean as a line over the raw range as a band; returns the legend key (band and line
    drawn as one), or None for a series without samples in the window (e.g. telemetry from before
    the sampler followed the run's processes). A resume breaks both: nothing was measured while the
    run was down, and a line across the gap would draw a measurement that was never taken."""
    times, values = np.asarray(series[0], dtype=float), np.asarray(series[1], dtype=float)
    drawn = None
    for piece in np.split(np.arange(len(times)), np.searchsorted(times, resumes)):
        mean, low, high = rolling_band(list(times[piece]), list(values[piece])) if len(piece) else ((), (), ())
        shown = (times[piece] >= span[0]) & (times[piece] <= span[1])
        if not shown.any():
            continue
        band = axis.fill_between(times[piece][shown], low[shown], high[shown], color=color, alpha=0.12, lw=0)
        (line,) = axis.plot(times[piece][shown], mean[shown], color=color, ls=style, lw=1.1,
                            label=label if drawn is None else "_" + label)
        drawn = drawn or ((band, line), label)
    return drawn


def _resumes(axis, resumes: list[float]) -> tuple | None:
    """A line where the run went on after an interruption; returns its legend key, or None without one."""
    lines = [axis.axvline(at, color=RESUME_COLOR, ls=(0, (1, 1)), lw=1.2) for at in resumes]
    return (lines[0], "resumed after an interruption (down time not on the run clock)") if lines else None


def _series(samples: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(times, values) of one key; a sample without it is left out, not drawn as zero."""
    points = [(sample["t"], sample[key]) for sample in samples if isinstance(sample.get(key), int | float)]
    return [t for t, _ in points], [value for _, value in points]


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


def thread_budget(run: Run) -> int | None:
    """The CPU threads the run's plan allowed (result.json's cpu.thread_budget, else the profile's
    pipeline.threads); None where neither is recorded."""
    # getattr: a Run assembled by hand (as the telemetry tests do) may carry a bare mapping as its result.
    recorded = (getattr(run.result, "cpu", None) or {}).get("thread_budget")
    if not isinstance(recorded, int):
        recorded = (run.hardware.get("pipeline") or {}).get("threads")
    return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0 else None


def logical_cpus(samples: list[dict]) -> int | None:
    """The machine's logical CPUs: the sampler records one "cores" entry for each."""
    counts = [len(sample["cores"]) for sample in samples if isinstance(sample.get("cores"), list) and sample["cores"]]
    return counts[0] if counts else None


def _budget(axis, run: Run, samples: list[dict]) -> tuple | None:
    """The thread budget as a line on the machine scale, and a right axis in percent of it; returns
    its legend key (None where the budget or the machine's CPUs are unknown)."""
    budget, cpus = thread_budget(run), logical_cpus(samples)
    axis.set_ylabel(f"% busy\nCPU: of all {cpus or '?'} logical CPUs\nGPU: of its time", fontsize=8)
    if budget is None or cpus is None:
        return None
    share = 100.0 * min(budget, cpus) / cpus
    label = f"thread budget: {budget} of {cpus} logical CPUs"
    line = axis.axhline(share, color=BUDGET_COLOR, ls="-.", lw=0.9, label=label)
    right = axis.secondary_yaxis("right", functions=(lambda value: value * 100.0 / share,
                                                     lambda value: value * share / 100.0))
    right.set_ylabel(f"CPU, % of the {budget}-thread budget", fontsize=8)
    return line, label


def _evaluations(axis, evaluations: list[dict], span: tuple[float, float]) -> tuple | None:
    """Shades each evaluation (it ends at its record's t and lasts eval_s); returns the legend key,
    or None when no evaluation falls in the window."""
    spans = [axis.axvspan(end - seconds, end, color=EVALUATION_COLOR, alpha=0.2, lw=0)
             for record in evaluations if isinstance(end := record.get("t"), int | float)
             and isinstance(seconds := record.get("eval_s"), int | float) and end - seconds <= span[1]
             and end >= span[0]]
    return (spans[0], "evaluation") if spans else None


def _legend(axis, samples: list[dict], keys: list[tuple], notes: list[str]) -> None:
    if not samples:
        axis.text(0.5, 0.5, "no telemetry in this window", ha="center", va="center", transform=axis.transAxes,
                  fontsize=8)
    # Beside the panel, past the right axis: a busy CPU runs along the top, an idle one along the bottom.
    axis.legend([handle for handle, _ in keys], [label for _, label in keys], fontsize=7,
                title="\n".join(notes) or None, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.09, 1.0),
                borderaxespad=0.0)


def _in_window(samples: list[dict], window: tuple[float, float]) -> list[dict]:
    start, end = window
    return [sample for sample in samples if isinstance(sample.get("t"), int | float) and start <= sample["t"] <= end]
