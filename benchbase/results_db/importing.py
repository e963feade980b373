"""`benchbase results add`: run folders, folders of runs and sweeps into the results database.

A path is read as `benchbase score` reads it (report.load_groups): a run folder, a folder of
seeded runs, or a sweep's folder (one group per configuration). Each run is stored once, by its
id; each group once, by its runs' ids, with its olympic scores and RCP verdicts as `benchbase
score` computes them. Importing the same runs again adds nothing and is no error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from benchbase.rcp.checking import GroupRcp, rcp_of_groups
from benchbase.report.runs import RunGroup, load_groups
from benchbase.report.scoring import score_group
from benchbase.results_db.record import RunRecord, read_run_record
from benchbase.results_db.schema import (
    ENVIRONMENT,
    EVALUATIONS,
    GROUP_RUNS,
    GROUPS,
    RCP_VERDICTS,
    RUNS,
    SCORES,
    TTA,
    WALL_TIME_PARTS,
)
from benchbase.run_folder import RunFolder, find_run_folders

__all__ = ["Added", "Import", "add_imports", "add_paths", "read_imports"]


@dataclass(frozen=True)
class Import:
    """One path's groups, read and scored, ready to store."""

    path: Path
    groups: list[tuple[RunGroup, list[RunRecord], GroupRcp | None]]
    unfinished: list[Path] = field(default_factory=list)
    """The path's run folders when not one of them has a result.json: nothing to store, but named."""


@dataclass
class Added:
    """What one path added: runs new to the database, runs it already held, runs left out."""

    path: Path
    added: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    left_out: list[Path] = field(default_factory=list)
    """Run folders without a result.json (killed, or still running): nothing to store yet."""


def read_imports(paths: list[Path]) -> list[Import]:
    """Every path read before anything is written: a bad path leaves the database as it was."""
    now = datetime.now(UTC)
    found = []
    for path in paths:
        unfinished = _unfinished_runs_only(path)
        if unfinished:
            found.append(Import(path, [], unfinished))
            continue
        groups = load_groups([path])
        verdicts = rcp_of_groups(groups)
        found.append(Import(path, [(group, [read_run_record(run, now) for run in group.runs], verdicts.get(group.name))
                                   for group in groups]))
    return found


def _unfinished_runs_only(path: Path) -> list[Path]:
    """The run folders ``path`` is or holds when none has finished (killed, or still running): a path
    that is left out whole rather than refused, so that one killed run does not stop the others' import."""
    found = find_run_folders(path)
    return [] if any(RunFolder(folder).result.is_file() for folder in found) else found


def add_imports(connection: sa.Connection, imports: list[Import]) -> list[Added]:
    return [_add_import(connection, item) for item in imports]


def add_paths(connection: sa.Connection, paths: list[Path]) -> list[Added]:
    return add_imports(connection, read_imports(paths))


def _add_import(connection: sa.Connection, item: Import) -> Added:
    added = Added(item.path, left_out=list(item.unfinished))
    for group, records, rcp in item.groups:
        for record in records:
            stored = _add_run(connection, record)
            (added.added if stored else added.already).append(record.run_id)
        _add_group(connection, group, item.path, [record.run_id for record in records], rcp)
        added.left_out += group.left_out
    return added


def _add_run(connection: sa.Connection, record: RunRecord) -> bool:
    """Store the run unless the database holds it; True when it was new."""
    if not _insert_if_new(connection, RUNS, record.run):
        return False
    for table, rows in ((ENVIRONMENT, record.environment), (EVALUATIONS, record.evaluations), (TTA, record.tta),
                        (WALL_TIME_PARTS, record.time_parts)):
        if rows:
            connection.execute(table.insert(), rows)
    return True


def _add_group(connection: sa.Connection, group: RunGroup, path: Path, run_ids: list[str],
               rcp: GroupRcp | None) -> None:
    group_id = hashlib.sha256("\n".join(sorted(run_ids)).encode()).hexdigest()
    judgement = None if rcp is None else rcp.judgement
    if not _insert_if_new(connection, GROUPS, {"group_id": group_id, "name": group.name, "source": str(path.resolve()),
                                               "rcp_file": None if rcp is None else rcp.source,
                                               "rcp_note": None if rcp is None else rcp.note}):
        return
    connection.execute(GROUP_RUNS.insert(), [{"group_id": group_id, "run_id": run_id}
                                             for run_id in dict.fromkeys(run_ids)])
    scores = [{"group_id": group_id, "target": label, "seconds": score.seconds, "runs": score.runs,
               "reached": score.converged, "stdev_seconds": score.stdev, "fastest_seconds": score.fastest,
               "slowest_seconds": score.slowest, "note": score.note} for label, score in score_group(group).items()]
    if scores:
        connection.execute(SCORES.insert(), scores)
    if judgement is not None and judgement.verdicts:
        connection.execute(RCP_VERDICTS.insert(), [
            {"group_id": group_id, "target": label, "passed": verdict.passed, "verdict": str(verdict.case),
             "explanation": verdict.explanation} for label, verdict in judgement.verdicts.items()])


def _insert_if_new(connection: sa.Connection, table: sa.Table, row: dict[str, Any]) -> bool:
    """Insert ``row`` unless its key is taken; True when it was inserted. On PostgreSQL and SQLite the
    database decides (ON CONFLICT DO NOTHING), so two imports of the same run at once store it once
    and neither fails; elsewhere, a look first."""
    dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(connection.dialect.name)
    if dialect is not None:
        statement = dialect.insert(table).values(row).on_conflict_do_nothing().returning(*table.primary_key.columns)
        return connection.execute(statement).first() is not None
    key = [column == row[column.name] for column in table.primary_key.columns]
    if connection.execute(sa.select(*table.primary_key.columns).where(*key)).first():
        return False
    connection.execute(table.insert(), [row])
    return True
