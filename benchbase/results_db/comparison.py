"""What the results database shows: its runs, and two systems or two backends side by side.

A comparison holds everything else fixed that it can: ``--by system`` compares the two hardware
profiles' runs of the same workload, backend and target, ``--by backend`` the two backends' on
the same workload, system and target. Each side is its runs' TTA (median, and min-max: the
spread a reader needs to judge a difference), the epochs to the target and the final WER.
Rows never mix workloads. Runs that differ from the rest of their row in division, training
strategy or device count are not like with like: the row's "differs" column names what differs,
and a note each side's setups.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sqlalchemy as sa

from benchbase.errors import InputError
from benchbase.report.report_table import ReportTable
from benchbase.report.runs import strategy_name
from benchbase.results_db.schema import RUNS, TTA, WALL_TIME_PARTS
from benchbase.specs.result import TIME_PARTS

__all__ = ["DIMENSIONS", "Dimension", "Setup", "comparison_table", "runs_table", "setup_of", "time_table"]

Dimension = Literal["system", "backend"]
DIMENSIONS: dict[str, str] = {"system": "backend", "backend": "system"}
"""What is compared -> what is held fixed beside the workload."""


@dataclass(frozen=True, order=True)
class Setup:
    """What a comparison must hold fixed besides its row's workload, system or backend, and target."""

    division: str
    strategy: str
    devices: int | None

    def text(self) -> str:
        devices = "? devices" if self.devices is None else f"{self.devices} device{'' if self.devices == 1 else 's'}"
        return f"{self.division}, {self.strategy}, {devices}"


def setup_of(config: Any, result: Any, division: str | None) -> Setup:
    """A stored run's division, strategy (sync where config.json names none) and device count (the
    plan it trained on, else its processes)."""
    config = config if isinstance(config, dict) else {}
    result = result if isinstance(result, dict) else {}
    plan = result.get("device_plan")
    count = plan.get("count") if isinstance(plan, dict) else None
    count = count if isinstance(count, int) else result.get("world_size")
    return Setup(division or str(config.get("division") or "?"), strategy_name(config),
                 count if isinstance(count, int) else None)


@dataclass
class _Side:
    runs: set[str] = field(default_factory=set)
    seconds: list[float] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    wers: dict[str, float] = field(default_factory=dict)
    """Run id -> final WER, once per run whatever its number of targets."""
    setups: set[Setup] = field(default_factory=set)

    def cells(self) -> list[object]:
        minutes = [value / 60 for value in self.seconds]
        tta = f"{_median(minutes):.2f} ({min(minutes):.2f}-{max(minutes):.2f})" if minutes else None
        epochs = _median(self.epochs)
        return [f"{len(self.seconds)}/{len(self.runs)}", tta, None if epochs is None else f"{epochs:g}",
                _median(list(self.wers.values()))]


def runs_table(connection: sa.Connection) -> ReportTable:
    """One row per stored run, the oldest first."""
    columns = (RUNS.c.run_id, RUNS.c.workload, RUNS.c.backend, RUNS.c.system, RUNS.c.seed, RUNS.c.division,
               RUNS.c.status, RUNS.c.precision, RUNS.c.started_at, RUNS.c.epochs, RUNS.c.final_wer,
               RUNS.c.benchbase_version)
    query = sa.select(*columns).order_by(RUNS.c.started_at, RUNS.c.run_id)
    rows = [[row.run_id[:12], row.workload, row.backend, row.system, row.seed, row.division, row.status,
             row.precision, None if row.started_at is None else row.started_at.strftime("%Y-%m-%d %H:%M"),
             row.epochs, row.final_wer, row.benchbase_version] for row in connection.execute(query)]
    return ReportTable(f"{len(rows)} run(s)", ["run", "workload", "backend", "system", "seed", "division", "status",
                       "precision", "started (UTC)", "epochs", "final WER", "benchbase"], rows, name="runs",
                       notes=[] if rows else ["The database holds no runs yet (`benchbase results add RUN_DIR`)."])


def time_table(connection: sa.Connection) -> ReportTable:
    """Where each stored run's wall time went, the oldest first: each part's share (%) of the run
    clock, adding up to 100, beside the padding's share of the FLOPs and the MFUs (%)."""
    query = sa.select(RUNS.c.run_id, RUNS.c.workload, RUNS.c.backend, RUNS.c.system, RUNS.c.run_seconds,
                      RUNS.c.stages, RUNS.c.padding_fraction, RUNS.c.mfu_hardware, RUNS.c.mfu_useful,
                      ).order_by(RUNS.c.started_at, RUNS.c.run_id)
    runs = connection.execute(query).all()
    fractions: dict[str, dict[str, float | None]] = {}
    for row in connection.execute(sa.select(WALL_TIME_PARTS)):
        fractions.setdefault(row.run_id, {})[row.part] = row.fraction
    rows = []
    for run in runs:
        parts = fractions.get(run.run_id, {})
        rows.append([run.run_id[:12], run.workload, run.backend, run.system, run.run_seconds,
                     *(_percent(parts.get(part)) if parts else None for part in TIME_PARTS),
                     run.stages or "not recorded", _percent(run.padding_fraction), _percent(run.mfu_hardware),
                     _percent(run.mfu_useful)])
    notes = ["Each part is a share of the run clock; a run's parts add up to 100. \"step\" is the steps' time the "
             "backend did not split into phases (all of it where its phases are not reported). MFU: the FLOPs of the "
             "padded (hardware) and of the valid frames (useful) over the run seconds times the devices' peak; "
             "NA where no peak is known. A run stored before benchbase recorded these shows none."]
    return ReportTable(f"where the wall time went, {len(rows)} run(s)",
                       ["run", "workload", "backend", "system", "run s",
                        *(part.replace("_", " ") + " %" for part in TIME_PARTS),
                        "step phases", "padding %", "MFU %", "useful MFU %"], rows, name="time", digits=1,
                       notes=notes if rows else ["The database holds no runs yet (`benchbase results add RUN_DIR`)."])


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def comparison_table(connection: sa.Connection, by: Dimension, first: str, second: str) -> ReportTable:
    """``first`` and ``second`` (two systems or two backends) side by side, per workload, the dimension
    held fixed, and target."""
    compared, held = RUNS.c[by], RUNS.c[DIMENSIONS[by]]
    _require_present(connection, by, [first, second])
    setups = {row.run_id: setup_of(row.config, row.result, row.division) for row in connection.execute(
        sa.select(RUNS.c.run_id, RUNS.c.division, RUNS.c.config, RUNS.c.result).where(compared.in_([first, second])))}
    query = (sa.select(RUNS.c.run_id, RUNS.c.workload, held.label("held"), compared.label("side"), RUNS.c.final_wer,
                       TTA.c.target, TTA.c.seconds, TTA.c.epoch)
             .join(TTA, TTA.c.run_id == RUNS.c.run_id).where(compared.in_([first, second])))
    sides: dict[tuple[str, str, str], dict[str, _Side]] = {}
    for row in connection.execute(query):
        key = (row.workload or "?", row.held or "?", row.target)
        side = sides.setdefault(key, {first: _Side(), second: _Side()})[row.side]
        _count(side, row)
        side.setups.add(setups[row.run_id])
    compared_pairs = {key: pair for key, pair in sides.items() if pair[first].runs and pair[second].runs}
    ordered = sorted(compared_pairs.items(), key=lambda item: _target_order(item[0]))
    differs = [_differs(pair[first].setups | pair[second].setups) for _, pair in ordered]
    marked = any(differs)
    rows = [[*key, *pair[first].cells(), *pair[second].cells(), _ratio(pair[first], pair[second]),
             *([differ or None] if marked else [])] for (key, pair), differ in zip(ordered, differs, strict=True)]
    per_side = ["runs", "TTA", "epochs", "WER"]
    headers = ["workload", DIMENSIONS[by], "target", *(f"{name} {column}" for name in (first, second)
                                                        for column in per_side), f"{second} / {first}",
               *(["differs"] if marked else [])]
    return ReportTable(f"{first} and {second} side by side, by {by}", headers, rows, name="comparison",
                       notes=[*_notes(first, second), *_mixed(ordered, differs, by, first, second),
                              *_one_sided(sides, first, second)])


def _differs(setups: set[Setup]) -> str:
    """What the runs of one row differ in ("division, strategy, devices"); "" when nothing."""
    return ", ".join(name for name in ("division", "strategy", "devices")
                     if len({getattr(setup, name) for setup in setups}) > 1)


def _mixed(ordered: list, differs: list[str], by: str, first: str, second: str) -> list[str]:
    """One line per workload and held value whose runs differ in setup: each side's setups."""
    notes: dict[str, None] = {}
    for ((workload, held, _), pair), differ in zip(ordered, differs, strict=True):
        if differ:
            sides = "; ".join(f"{name}: {' | '.join(setup.text() for setup in sorted(pair[name].setups))}"
                              for name in (first, second))
            notes[f"Not like with like ({differ}): {held} on {workload}: {sides}."] = None
    if notes:
        notes[f"differs: what the row's runs differ in (division, strategy, device count): its ratio measures more "
              f"than the two {by}s."] = None
    return list(notes)


def _one_sided(sides: dict[tuple[str, str, str], dict[str, _Side]], first: str, second: str) -> list[str]:
    """A note for each configuration only one side ran: nothing to compare it with."""
    alone = {(workload, held, name) for (workload, held, _), pair in sides.items() for name in (first, second)
             if pair[name].runs and not pair[second if name == first else first].runs}
    return [f"Not compared: {held} on {workload} has runs of {name} only." for workload, held, name in sorted(alone)]


def _count(side: _Side, row: sa.Row[*tuple[Any, ...]]) -> None:
    side.runs.add(row.run_id)
    if row.seconds is not None:
        side.seconds.append(row.seconds)
    if row.epoch is not None:
        side.epochs.append(row.epoch)
    if row.final_wer is not None:
        side.wers[row.run_id] = row.final_wer


def _require_present(connection: sa.Connection, by: Dimension, names: list[str]) -> None:
    stored = sorted(value for (value,) in connection.execute(sa.select(RUNS.c[by]).distinct()) if value)
    for name in names:
        if name not in stored:
            raise InputError(f"no runs of {by} {name!r} in the results database; {by}s there: "
                             f"{', '.join(stored) or 'none'}")


def _notes(first: str, second: str) -> list[str]:
    return ["runs: the runs that reached the target / the runs of that configuration.",
            "TTA: minutes, the median (min-max) over the runs that reached the target; epochs: their median epochs "
            "to it.",
            "WER: the median final WER on the scored subset (the untimed final evaluation's where it ran, else the "
            "last evaluation's).",
            f"{second} / {first}: the ratio of the TTA medians (below 1: {second} is faster)."]


def _ratio(first: _Side, second: _Side) -> float | None:
    mine, theirs = _median(first.seconds), _median(second.seconds)
    return None if mine is None or theirs is None or mine == 0 else theirs / mine


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _target_order(key: tuple[str, str, str]) -> tuple[str, str, str, float]:
    # "CER 40" before "CER 30": the targets in the order a run reaches them, as result.json lists them.
    workload, held, target = key
    metric, _, value = target.rpartition(" ")
    try:
        return workload, held, metric, -float(value)
    except ValueError:
        return workload, held, target, 0.0
