"""Alembic's environment for the results database: migrations run on the connection that
benchbase.results_db.store hands over (``config.attributes["connection"]``), or, from Alembic's own
command line, on the URL its ``sqlalchemy.url`` option names."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from benchbase.results_db.schema import METADATA


def _run(connection: sa.Connection) -> None:
    context.configure(connection=connection, target_metadata=METADATA, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def _migrate() -> None:
    given = context.config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    engine = sa.create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as connection:
        _run(connection)


_migrate()
