"""What the report's figures share: colors, log-axis labels, legends, the PNG writer."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: a report must work on a headless machine

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from benchbase.atomic import atomic_write_bytes
from benchbase.report.throughput import WARMUP_BATCHES

__all__ = ["WARMUP_BATCHES", "colored", "label_log_axis", "log_limits", "log_ticks", "minutes", "movable",
           "note_if_empty", "outside_legend", "positive", "save", "separate_labels"]

DPI = 120
# Room above and below the data on a log axis, in decades: a share of the data's span, plus a little
# so that a nearly flat series does not fill the panel edge to edge.
LOG_MARGIN_SHARE, LOG_MARGIN_DECADES = 0.06, 0.01
MOST_LOG_TICKS = 8  # more labels than this on a panel 2.5 inches high overprint
# Round mantissas from dense to sparse: the densest set that fits under MOST_LOG_TICKS is used.
MANTISSA_SETS = ((1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 5, 6, 8), (1, 2, 3, 5), (1, 2, 5), (1, 3), (1,))
TICK_SPACING = 0.06  # the least gap between two labels, as a share of the axis' log span
MOVABLE = "benchbase-movable-label"
"""The gid of an in-plot label that separate_labels may move up or down."""
LABEL_GAP_POINTS = 1.0  # the least gap between two in-plot labels


def positive(value) -> bool:
    # Log axes cannot show zero, negative or missing values; nor can a median use NaN.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def minutes(records: list[dict]) -> list[float]:
    return [record.get("t", 0.0) / 60 for record in records]


def colored(groups: list):
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [(colors[index % len(colors)], group) for index, group in enumerate(groups)]


def label_log_axis(axis) -> None:
    """Fit a log y axis to what is drawn on it and label it from the lowest value to the highest.

    Matplotlib's log locator labels powers of ten, and on an axis that spans less than a decade
    or two it leaves the data's ends unlabelled; a reader then cannot tell 25 from 35."""
    values = [value for line in axis.lines for value in line.get_ydata() if positive(value)]
    if not values:
        return
    low, high = min(values), max(values)
    axis.set_ylim(*log_limits(low, high))
    axis.yaxis.set_major_locator(FixedLocator(log_ticks(low, high)))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(NullFormatter())


def log_ticks(low: float, high: float) -> list[float]:
    """Labels for a log axis over [low, high]: both ends (to two significant digits) and round
    numbers between them, as dense as fits without overprinting."""
    ends = sorted({_significant(low), _significant(high)})
    bottom, top = log_limits(low, high)
    span = math.log10(top / bottom)
    for mantissas in MANTISSA_SETS:
        inner = [tick for tick in _round_numbers(low, high, mantissas)
                 if all(abs(math.log10(tick / end)) > TICK_SPACING * span for end in ends)]
        if len(inner) + len(ends) <= MOST_LOG_TICKS:
            break
    return sorted(ends + inner)


def log_limits(low: float, high: float) -> tuple[float, float]:
    """The axis limits for data from low to high: the data's span with a margin on either side."""
    factor = 10 ** (LOG_MARGIN_SHARE * math.log10(high / low) + LOG_MARGIN_DECADES)
    return low / factor, high * factor


def _round_numbers(low: float, high: float, mantissas: tuple[float, ...]) -> list[float]:
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    return [float(f"{mantissa * 10.0 ** decade:.12g}") for decade in decades for mantissa in mantissas
            if low < mantissa * 10.0 ** decade < high]


def _significant(value: float, digits: int = 2) -> float:
    return float(f"{value:.{digits}g}")


def outside_legend(axis) -> None:
    # Beside the panel, not on it: curves run through every corner of a panel at some time.
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def note_if_empty(axis, message: str) -> None:
    if not any(len(line.get_xdata()) for line in axis.lines if line.get_linestyle() != "--"):
        axis.text(0.5, 0.5, message, ha="center", va="center", transform=axis.transAxes, fontsize=8)


def movable(annotation):
    """Marks an annotation placed in offset points (textcoords="offset points") as one that
    separate_labels may move up or down, off the labels beside it."""
    annotation.set_gid(MOVABLE)
    return annotation


def separate_labels(figure) -> None:
    """Move the figure's movable labels up or down, each by whole label heights and as little as
    it takes, until no two overlap: TTA labels of runs that reach a target at nearly the same time,
    or labels of targets a few points apart, would otherwise print over each other.

    It measures the labels where the figure is now laid out; save() calls it again after the
    final layout."""
    renderer = figure.canvas.get_renderer()
    points_per_pixel = 72.0 / figure.dpi
    gap = LABEL_GAP_POINTS / points_per_pixel
    placed: list = []
    for label in (text for axis in figure.axes for text in axis.texts if text.get_gid() == MOVABLE):
        home_x, home_y = label.xyann
        step = (label.get_window_extent(renderer).height + gap) * points_per_pixel
        for shift in _shifts(2 * len(placed) + 2):
            label.xyann = (home_x, home_y + shift * step)
            box = label.get_window_extent(renderer).padded(gap / 2)
            if not any(box.overlaps(other) for other in placed):
                break
        placed.append(box)


def _shifts(most: int) -> list[int]:
    """0, -1, 1, -2, 2, ...: down first, as the labels hang below their marks."""
    return [0] + [sign * step for step in range(1, most + 1) for sign in (-1, 1)]


def save(figure, path: Path) -> Path:
    figure.tight_layout()
    separate_labels(figure)
    atomic_write_bytes(path, lambda handle: figure.savefig(handle, dpi=DPI, format="png"))
    plt.close(figure)
    return path
