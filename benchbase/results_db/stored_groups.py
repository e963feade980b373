"""The database's groups of runs as the report reads groups of run folders (`benchbase report --from-db`).

Each group is one imported group (a folder of seeded runs, a sweep's configuration), its runs
rebuilt from the config.json and result.json the database keeps. A run's metrics and telemetry
are not stored: where its folder is still at the path it was imported from, the report's figures
find them there, else a run has none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError

from benchbase.errors import InputError
from benchbase.report.runs import Run, RunGroup
from benchbase.results_db.schema import GROUP_RUNS, GROUPS, RUNS
from benchbase.specs import RunResult

__all__ = ["stored_groups"]


def stored_groups(connection: sa.Connection, taken: set[str] | None = None) -> list[RunGroup]:
    """Every stored group, named as it was imported (a number added where a name is in ``taken``
    or repeats), its runs in seed order."""
    query = (sa.select(GROUPS.c.group_id, GROUPS.c.name, RUNS.c.run_id, RUNS.c.source, RUNS.c.config, RUNS.c.result)
             .join(GROUP_RUNS, GROUP_RUNS.c.group_id == GROUPS.c.group_id)
             .join(RUNS, RUNS.c.run_id == GROUP_RUNS.c.run_id)
             .order_by(GROUPS.c.name, GROUPS.c.group_id, RUNS.c.seed, RUNS.c.run_id))
    members: dict[str, tuple[str, list[Run]]] = {}
    for row in connection.execute(query):
        members.setdefault(row.group_id, (row.name, []))[1].append(_run(row))
    names = set(taken or ())
    groups = []
    for name, runs in members.values():
        groups.append(RunGroup(_free_name(name, names), runs))
        names.add(groups[-1].name)
    return groups


def _run(row: sa.Row[*tuple[Any, ...]]) -> Run:
    try:
        result = RunResult.model_validate(row.result)
    except ValidationError:
        raise InputError(f"run {row.run_id[:12]} in the results database: its result.json no longer reads as one "
                         "(stored by another benchbase version?)") from None
    return Run(Path(row.source or "."), result, row.config if isinstance(row.config, dict) else {})


def _free_name(name: str, taken: set[str]) -> str:
    candidate, index = name, 2
    while candidate in taken:
        candidate, index = f"{name}-{index}", index + 1
    return candidate
