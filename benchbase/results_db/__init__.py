"""A results database: runs from many machines and backends in one SQL store (SQLite or PostgreSQL).

`benchbase results add` imports run folders and sweeps (store.open_for_writing upgrades the
schema with the Alembic migrations in migrations/ first), `results list`, `results time` and
`results compare` read it, and `benchbase report --from-db` reports its groups as it reports run folders. The
tables are schema.py's; docs/results-database.md describes them for a reader with SQL or
Datasette.
"""

from __future__ import annotations

from benchbase.results_db.comparison import DIMENSIONS, comparison_table, runs_table, time_table
from benchbase.results_db.importing import Added, Import, add_imports, add_paths, read_imports
from benchbase.results_db.record import RunRecord, read_run_record, run_id
from benchbase.results_db.store import database_to_read, database_url, describe, open_for_reading, open_for_writing
from benchbase.results_db.stored_groups import stored_groups

__all__ = [
    "DIMENSIONS",
    "Added",
    "Import",
    "RunRecord",
    "add_imports",
    "add_paths",
    "comparison_table",
    "database_to_read",
    "database_url",
    "describe",
    "open_for_reading",
    "open_for_writing",
    "read_imports",
    "read_run_record",
    "run_id",
    "runs_table",
    "stored_groups",
    "time_table",
]
