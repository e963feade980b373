"""The performance profile across workloads as a figure: rho_s(tau) per submitter, a step plot over
tau from 1 to 4 (AlgoPerf's), its score in the legend. The table of the same name holds the numbers."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt

from benchbase.report.figure_parts import colored, save
from benchbase.report.performance_profile import MAX_TAU, MIN_TAU, profile_steps
from benchbase.report.profile_table import AcrossWorkloads

__all__ = ["draw_performance_profile", "performance_profile_figure"]


def performance_profile_figure(across: AcrossWorkloads, path: Path) -> Path:
    return save(draw_performance_profile(across), path)


def draw_performance_profile(across: AcrossWorkloads):
    """One step line per submitter: the fraction of the workloads within tau times the fastest."""
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for color, submitter in colored(across.submitters):
        taus, heights = profile_steps(list(submitter.ratios.values()))
        axis.step(taus, heights, where="post", color=color, lw=1.6,
                  label=f"{submitter.name}: score {submitter.score:.3f}")
    axis.set_xlim(MIN_TAU, MAX_TAU)
    axis.set_ylim(-0.03, 1.03)  # a line at 0 or 1 stays visible beside the frame
    axis.set_xlabel("tau: time to the workload's targets over the fastest submitter's")
    axis.set_ylabel(f"fraction of the {len(across.workloads)} workloads")
    axis.grid(alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=8, loc="lower right")
    axis.set_title(f"performance profile across {', '.join(across.workloads)}\n(AlgoPerf's: a miss, or more "
                   f"than {MAX_TAU:g}x the fastest, never counts; score: the area over {MAX_TAU - MIN_TAU:g})",
                   fontsize=10)
    figure.tight_layout()
    return figure
