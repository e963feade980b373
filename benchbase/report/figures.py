"""The paper's figures from run folders, as PNG files (matplotlib, no display needed).

Figure 7: loss, CER and WER over time, the targets as horizontal lines.
Figure 8: CPU and GPU utilization over a window of the run.
Figure 9: training throughput over time.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt  # noqa: E402

from benchbase.atomic import atomic_write_bytes  # noqa: E402
from benchbase.report.runs import Run, RunGroup  # noqa: E402

__all__ = ["accuracy_figure", "throughput_figure", "utilization_figure", "write_figures"]

DPI = 120
SMOOTHING_BATCHES = 25


def write_figures(groups: list[RunGroup], out: Path, window: tuple[float, float] | None = None) -> list[Path]:
    """Write the three figures into out; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    return [accuracy_figure(groups, out / "accuracy-over-time.png"),
            utilization_figure(groups, out / "utilization.png", window),
            throughput_figure(groups, out / "throughput-over-time.png")]


def accuracy_figure(groups: list[RunGroup], path: Path) -> Path:
    figure, (loss, cer, wer) = plt.subplots(3, 1, sharex=True, figsize=(8, 9))
    for color, group in _colored(groups):
        for index, run in enumerate(group.runs):
            label = _label(group, index)
            batches, evaluations = run.batches, run.evaluations
            loss.plot(_minutes(batches), [b.get("loss") for b in batches], color=color, alpha=0.6, lw=0.8, label=label)
            cer.plot(_minutes(evaluations), [e.get("cer") for e in evaluations], "o-", color=color, ms=3, label=label)
            wer.plot(_minutes(evaluations), [e.get("wer") for e in evaluations], "o-", color=color, ms=3, label=label)
    _target_lines(cer, wer, groups)
    for axis, name in ((loss, "CTC loss"), (cer, "CER (%)"), (wer, "WER (%)")):
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
    loss.set_yscale("log")
    wer.set_xlabel("run clock (minutes)")
    cer.legend(fontsize=7, loc="upper right")
    figure.suptitle("loss, CER and WER over time (targets dashed)")
    return _save(figure, path)


def utilization_figure(groups: list[RunGroup], path: Path, window: tuple[float, float] | None = None) -> Path:
    figure, (cpu, gpu) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for color, group in _colored(groups):
        run = group.runs[0]
        samples = _in_window(run.telemetry, window or _default_window(run))
        times = [sample["t"] for sample in samples]
        cpu.plot(times, [sample.get("cpu") for sample in samples], color=color, lw=0.8, label=group.name)
        gpu_times, gpu_util = _gpu_series(samples)
        if gpu_util:
            gpu.plot(gpu_times, gpu_util, color=color, lw=0.8, label=group.name)
    if not gpu.lines:
        gpu.text(0.5, 0.5, "no GPU utilization (NVML unavailable)", ha="center", va="center", transform=gpu.transAxes)
    for axis, name in ((cpu, "CPU utilization (%)"), (gpu, "GPU utilization (%, mean of GPUs)")):
        axis.set_ylabel(name)
        axis.set_ylim(0, 105)
        axis.grid(alpha=0.3)
    gpu.set_xlabel("run clock (seconds)")
    cpu.legend(fontsize=7, loc="lower right")
    figure.suptitle("CPU and GPU utilization over a window (first run of each group)")
    return _save(figure, path)


def throughput_figure(groups: list[RunGroup], path: Path) -> Path:
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
    axis.legend(fontsize=7, loc="lower right")
    axis.set_title(f"training throughput (faint: per batch; solid: median of {SMOOTHING_BATCHES} batches)")
    return _save(figure, path)


def _target_lines(cer, wer, groups: list[RunGroup]) -> None:
    targets = {(target.get("metric"), target.get("value")) for group in groups
               for target in (group.workload.get("tta") or {}).get("targets", [])}
    for metric, value in sorted(targets, key=str):
        axis = cer if metric == "cer" else wer
        axis.axhline(value, color="black", ls="--", lw=0.8)
        axis.annotate(f"{str(metric).upper()} {value:g}", (0, value), xycoords=("axes fraction", "data"),
                      fontsize=7, va="bottom")


def _gpu_series(samples: list[dict]) -> tuple[list[float], list[float]]:
    times, values = [], []
    for sample in samples:
        readings = [gpu.get("util") for gpu in sample.get("gpus") or [] if isinstance(gpu, dict)]
        readings = [value for value in readings if isinstance(value, int | float)]
        if readings:
            times.append(sample["t"])
            values.append(sum(readings) / len(readings))
    return times, values


def _default_window(run: Run) -> tuple[float, float]:
    # A minute of steady training, past the first batches' warm-up.
    batches = run.batches
    start = batches[min(len(batches) - 1, 5)]["t"] if batches else 0.0
    return start, start + 60.0


def _in_window(samples: list[dict], window: tuple[float, float]) -> list[dict]:
    start, end = window
    return [sample for sample in samples if isinstance(sample.get("t"), int | float) and start <= sample["t"] <= end]


def _rolling_median(values: list[float]) -> list[float]:
    return [statistics.median(values[max(0, index - SMOOTHING_BATCHES + 1): index + 1])
            for index in range(len(values))]


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
