"""Where a run's time went: a row per part of its wall time, and its padding and MFU on the run.

The runs stored before this revision get theirs from the result.json the database holds (empty
where that run recorded none).

Revision ID: 0002
Revises: 0001
Created: 2026-11-29
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

RUN_ID = sa.String(64)


def _new_run_columns() -> tuple[sa.Column, ...]:
    """The columns runs gains (new objects each call: a Column belongs to one table)."""
    return (
        sa.Column("stages", sa.String(20),
                  comment="reported, or not reported: whether the backend timed its step's phases"),
        sa.Column("padding_fraction", sa.Float, comment="the share of the training FLOPs spent on padded frames"),
        sa.Column("mfu_hardware", sa.Float,
                  comment="padded FLOPs / (run seconds x the devices' peak); null: no peak known"),
        sa.Column("mfu_useful", sa.Float, comment="the valid frames' FLOPs / (run seconds x peak)"),
    )


NEW_RUN_COLUMNS = tuple(column.name for column in _new_run_columns())


def upgrade() -> None:
    for column in _new_run_columns():
        op.add_column("runs", column)
    time_parts = op.create_table(
        "time_parts",
        sa.Column("run_id", RUN_ID, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("part", sa.String(30), primary_key=True,
                  comment="data_wait, host_to_device, forward, backward, optimizer, step, evaluation, checkpoint "
                  "or other"),
        sa.Column("seconds", sa.Float),
        sa.Column("fraction", sa.Float, comment="of the run's wall time; a run's fractions add up to one"),
    )
    _fill_from_stored_results(time_parts)


def _fill_from_stored_results(time_parts: sa.Table) -> None:
    """The new columns and rows of the runs already stored, from their result.json. Written out
    here rather than calling the importer's code, so that this revision does what it did when
    written whatever the importer becomes."""
    connection = op.get_bind()
    runs = sa.table("runs", sa.column("run_id"), sa.column("result", sa.JSON),
                    *(sa.column(name) for name in NEW_RUN_COLUMNS))
    for run_id, result in connection.execute(sa.select(runs.c.run_id, runs.c.result)).all():
        result = (json.loads(result) if isinstance(result, str) else result) or {}
        compute, breakdown = result.get("compute") or {}, result.get("time_breakdown") or {}
        connection.execute(runs.update().where(runs.c.run_id == run_id).values(
            stages=breakdown.get("stages"), padding_fraction=_number(compute.get("padding_fraction")),
            mfu_hardware=_number(compute.get("mfu_hardware")), mfu_useful=_number(compute.get("mfu_useful"))))
        seconds, fractions = breakdown.get("seconds") or {}, breakdown.get("fractions") or {}
        rows = [{"run_id": run_id, "part": part, "seconds": _number(seconds.get(part)),
                 "fraction": _number(fractions.get(part))} for part in fractions]
        if rows:
            connection.execute(time_parts.insert(), rows)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def downgrade() -> None:
    op.drop_table("time_parts")
    with op.batch_alter_table("runs") as batch:
        for name in reversed(NEW_RUN_COLUMNS):
            batch.drop_column(name)
