"""The results database's tables (SQLAlchemy Core), as the newest migration leaves them.

One row of ``runs`` per run, keyed by the run's id (record.run_id); the other tables hang off a
run or off a group of runs (what `benchbase score` scores together: a folder of seeded runs, a
sweep's configuration). The migrations in migrations/versions/ create these tables; a test
compares the two, so a change here without a migration fails.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["ENVIRONMENT", "EVALUATIONS", "GROUPS", "GROUP_RUNS", "METADATA", "RCP_VERDICTS", "RUNS", "SCORES",
           "TTA", "WALL_TIME_PARTS"]

METADATA = sa.MetaData()

_RUN_ID = sa.String(64)
"""A SHA-256 in hex."""

RUNS = sa.Table(
    "runs", METADATA,
    sa.Column("run_id", _RUN_ID, primary_key=True, comment="SHA-256 of the run's mllog.log and config.json"),
    sa.Column("workload", sa.String(200)),
    sa.Column("backend", sa.String(100)),
    sa.Column("system", sa.String(200), comment="the hardware profile's name"),
    sa.Column("seed", sa.Integer),
    sa.Column("division", sa.String(20)),
    sa.Column("status", sa.String(20)),
    sa.Column("stop_reason", sa.String(50)),
    sa.Column("precision", sa.String(30)),
    sa.Column("global_batch", sa.Integer),
    sa.Column("world_size", sa.Integer),
    sa.Column("epochs", sa.Integer),
    sa.Column("run_seconds", sa.Float),
    sa.Column("final_wer", sa.Float, comment="the final evaluation's WER on the scored subset, else the last one's"),
    sa.Column("final_cer", sa.Float),
    sa.Column("final_from", sa.String(10), comment="final (the untimed final evaluation) or last (training's)"),
    sa.Column("benchbase_version", sa.String(50)),
    sa.Column("benchbase_commit", sa.String(64)),
    sa.Column("benchbase_dirty", sa.Boolean),
    sa.Column("host", sa.String(100)),
    sa.Column("started_at", sa.DateTime(timezone=True), comment="run_start, UTC"),
    sa.Column("imported_at", sa.DateTime(timezone=True)),
    sa.Column("source", sa.Text, comment="the run folder it was imported from"),
    sa.Column("config", sa.JSON, comment="config.json"),
    sa.Column("result", sa.JSON, comment="result.json"),
    sa.Column("stages", sa.String(20),
              comment="reported, or not reported: whether the backend timed its step's phases"),
    sa.Column("padding_fraction", sa.Float, comment="the share of the training FLOPs spent on padded frames"),
    sa.Column("mfu_hardware", sa.Float,
              comment="padded FLOPs / (run seconds x the devices' peak); null: no peak known"),
    sa.Column("mfu_useful", sa.Float, comment="the valid frames' FLOPs / (run seconds x peak)"),
    sa.Index("runs_by_workload", "workload", "backend", "system"),
)

ENVIRONMENT = sa.Table(
    "environment", METADATA,
    sa.Column("run_id", _RUN_ID, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.String(200), primary_key=True, comment="a dotted path: packages.torch, cpu.model, ..."),
    sa.Column("value", sa.Text),
)

EVALUATIONS = sa.Table(
    "evaluations", METADATA,
    sa.Column("run_id", _RUN_ID, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("phase", sa.String(10), primary_key=True, comment="training (on the clock) or final (after run_stop)"),
    sa.Column("epoch", sa.Integer, primary_key=True),
    sa.Column("subset", sa.String(50), primary_key=True),
    sa.Column("wer", sa.Float),
    sa.Column("cer", sa.Float, comment="jiwer's CER (edits / reference)"),
    sa.Column("paper_cer", sa.Float, comment="the paper's CER (edits / the longer of hypothesis and reference)"),
    sa.Column("loss", sa.Float),
    sa.Column("run_seconds", sa.Float, comment="the run clock when the evaluation ended; null after run_stop"),
)

WALL_TIME_PARTS = sa.Table(
    "time_parts", METADATA,
    sa.Column("run_id", _RUN_ID, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("part", sa.String(30), primary_key=True,
              comment="data_wait, host_to_device, forward, backward, optimizer, step, evaluation, checkpoint or other"),
    sa.Column("seconds", sa.Float),
    sa.Column("fraction", sa.Float, comment="of the run's wall time; a run's fractions add up to one"),
)

TTA = sa.Table(
    "tta", METADATA,
    sa.Column("run_id", _RUN_ID, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("target", sa.String(50), primary_key=True),
    sa.Column("seconds", sa.Float, comment="null: never reached"),
    sa.Column("epoch", sa.Integer),
)

GROUPS = sa.Table(
    "run_groups", METADATA,
    sa.Column("group_id", _RUN_ID, primary_key=True, comment="SHA-256 of its runs' ids"),
    sa.Column("name", sa.String(200)),
    sa.Column("source", sa.Text),
    sa.Column("rcp_file", sa.Text),
    sa.Column("rcp_note", sa.Text, comment="why the group has no RCP verdicts"),
)

GROUP_RUNS = sa.Table(
    "group_runs", METADATA,
    sa.Column("group_id", _RUN_ID, sa.ForeignKey("run_groups.group_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("run_id", _RUN_ID, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
)

SCORES = sa.Table(
    "scores", METADATA,
    sa.Column("group_id", _RUN_ID, sa.ForeignKey("run_groups.group_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("target", sa.String(50), primary_key=True),
    sa.Column("seconds", sa.Float, comment="the olympic score; null when invalid"),
    sa.Column("runs", sa.Integer),
    sa.Column("reached", sa.Integer),
    sa.Column("stdev_seconds", sa.Float),
    sa.Column("fastest_seconds", sa.Float),
    sa.Column("slowest_seconds", sa.Float),
    sa.Column("note", sa.Text),
)

RCP_VERDICTS = sa.Table(
    "rcp_verdicts", METADATA,
    sa.Column("group_id", _RUN_ID, sa.ForeignKey("run_groups.group_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("target", sa.String(50), primary_key=True),
    sa.Column("passed", sa.Boolean),
    sa.Column("verdict", sa.String(50), comment="the RCP rule's case"),
    sa.Column("explanation", sa.Text),
)
