"""Where the results database is and how it is opened: a SQLite file or any SQLAlchemy URL.

The schema is Alembic's: `benchbase results add` upgrades the database to the newest revision
(migrations/, shipped inside the package) before it writes; the commands that only read refuse
a database that is not at that revision, rather than guess at columns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from benchbase.errors import InputError

__all__ = ["DEFAULT_NAME", "ENVIRONMENT_VARIABLE", "MIGRATIONS", "database_url", "describe", "open_for_reading",
           "open_for_writing"]

ENVIRONMENT_VARIABLE = "BENCHBASE_RESULTS"
DEFAULT_NAME = "results.sqlite"
"""The default database's file, in benchbase's cache folder (BENCHBASE_CACHE, ~/.cache/benchbase)."""
MIGRATIONS = Path(__file__).parent / "migrations"


def database_url(given: str | None = None) -> sa.URL:
    """``given`` (a SQLAlchemy URL or a path to a SQLite file), else $BENCHBASE_RESULTS, else the
    SQLite file in benchbase's cache folder."""
    text = given or os.environ.get(ENVIRONMENT_VARIABLE) or str(_cache() / DEFAULT_NAME)
    if "://" not in text:
        return sa.URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    try:
        return sa.make_url(text)
    except sa.exc.ArgumentError as error:
        raise InputError(f"{text!r}: not a database URL or a file path ({error})") from None


def describe(url: sa.URL) -> str:
    """The URL as messages show it: a SQLite file as its path, a password hidden."""
    return (url.database or "") if url.get_backend_name() == "sqlite" else url.render_as_string(hide_password=True)


@contextmanager
def open_for_writing(url: sa.URL) -> Iterator[sa.Connection]:
    """A connection in one transaction, the schema upgraded to the newest revision first."""
    if url.get_backend_name() == "sqlite" and url.database:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = _engine(url)
    try:
        with _connect(url, engine) as connection, connection.begin():
            config = _alembic_config()
            config.attributes["connection"] = connection  # the migrations run on this connection
            command.upgrade(config, "head")
        with _connect(url, engine) as connection, connection.begin():
            yield connection
    finally:
        engine.dispose()


@contextmanager
def open_for_reading(url: sa.URL) -> Iterator[sa.Connection]:
    """A connection to a database at the newest revision; InputError for none or an older one."""
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).is_file()):
        raise InputError(f"{describe(url)}: no results database there (`benchbase results add` creates it)")
    engine = _engine(url)
    try:
        with _connect(url, engine) as connection:
            _require_newest(url, connection)
            yield connection
    finally:
        engine.dispose()


def _connect(url: sa.URL, engine: sa.Engine) -> sa.Connection:
    try:
        return engine.connect()
    except sa.exc.OperationalError as error:
        reason = str(error.orig or error).strip().splitlines()[0]
        raise InputError(f"{describe(url)}: cannot connect: {reason}") from None


def _require_newest(url: sa.URL, connection: sa.Connection) -> None:
    current = MigrationContext.configure(connection).get_current_revision()
    newest = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if current is None:
        raise InputError(f"{describe(url)}: not a benchbase results database (`benchbase results add` makes one)")
    if current != newest:
        raise InputError(f"{describe(url)}: the results database is at revision {current}, this benchbase reads "
                         f"{newest}; `benchbase results add` upgrades it")


def _engine(url: sa.URL) -> sa.Engine:
    try:
        engine = sa.create_engine(url)
        if url.get_backend_name() == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_foreign_keys)
        return engine
    except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as error:
        raise InputError(f"{describe(url)}: cannot open ({error}; PostgreSQL needs `pip install "
                         "'benchbase[postgres]'`)") from None


def _sqlite_foreign_keys(connection: Any, _record: object) -> None:
    # SQLite enforces foreign keys (and so the cascades) only when asked, per connection.
    connection.execute("PRAGMA foreign_keys=ON")


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _cache() -> Path:
    from benchbase.data.workload_data import default_cache  # the data package loads only for the default path

    return default_cache()
