"""Where the results database is and how it is opened: a SQLite file or any SQLAlchemy URL.

The schema is Alembic's: `benchbase results add` upgrades the database to the newest revision
(migrations/, shipped inside the package) before it writes; the commands that only read refuse
a database that is not at that revision, rather than guess at columns.

A writer holds the database's write lock for its whole transaction, the upgrade and the import
together: SQLite's BEGIN IMMEDIATE, PostgreSQL's transaction-scoped advisory lock. So two imports
at once into a new database take turns (the second finds the schema made), and one killed midway
leaves the database as it was before it began, never half a schema.
"""

from __future__ import annotations

import hashlib
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
from alembic.util import CommandError

from benchbase.errors import InputError

__all__ = ["DEFAULT_NAME", "ENVIRONMENT_VARIABLE", "MIGRATIONS", "database_to_read", "database_url", "describe",
           "open_for_reading", "open_for_writing"]

ENVIRONMENT_VARIABLE = "BENCHBASE_RESULTS"
DEFAULT_NAME = "results.sqlite"
"""The default database's file, in benchbase's cache folder (BENCHBASE_CACHE, ~/.cache/benchbase)."""
MIGRATIONS = Path(__file__).parent / "migrations"
SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file (an empty file is a new, empty database too)."""
WRITER_WAIT_S = 120
"""How long a writer waits for another writer's turn before it gives up (SQLite's busy timeout)."""
WRITE_LOCK = int.from_bytes(hashlib.sha256(b"benchbase results database").digest()[:8], "big", signed=True)
"""PostgreSQL's advisory lock key of a writer's turn: one bigint, the same in every benchbase."""


def database_url(given: str | None = None) -> sa.URL:
    """``given`` (a SQLAlchemy URL or a path to a SQLite file), else $BENCHBASE_RESULTS, else the
    SQLite file in benchbase's cache folder."""
    text = given or os.environ.get(ENVIRONMENT_VARIABLE) or str(_default_file())
    if "://" not in text:
        return sa.URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    try:
        return sa.make_url(text)
    except sa.exc.ArgumentError as error:
        raise InputError(f"{text!r}: not a database URL or a file path ({error})") from None


def database_to_read(given: str | None = None) -> sa.URL:
    """As database_url, but the default file's bare name (``results.sqlite``, as README writes `report
    --from-db results.sqlite`) names the default database when the current folder holds no such file:
    the database `results add` wrote without --db, not a new empty one."""
    if given == DEFAULT_NAME and not Path(given).exists():
        return database_url(None)
    return database_url(given)


def describe(url: sa.URL) -> str:
    """The URL as messages show it: a SQLite file as its path, a password hidden."""
    return (url.database or "") if url.get_backend_name() == "sqlite" else url.render_as_string(hide_password=True)


@contextmanager
def open_for_writing(url: sa.URL) -> Iterator[sa.Connection]:
    """A connection in one transaction that holds the write lock, the schema upgraded to the newest
    revision first; committed when the block ends, rolled back (upgrade included) when it raises."""
    _check_sqlite_file(url, creating=True)
    engine = _engine(url, writing=True)
    try:
        with _connect(url, engine) as connection, _write_turn(url, connection):
            _upgrade(url, connection)
            yield connection
    finally:
        engine.dispose()


@contextmanager
def open_for_reading(url: sa.URL) -> Iterator[sa.Connection]:
    """A connection to a database at the newest revision; InputError for none or an older one."""
    _check_sqlite_file(url, creating=False)
    engine = _engine(url, writing=False)
    try:
        with _connect(url, engine) as connection:
            _require_newest(url, connection)
            yield connection
    finally:
        engine.dispose()


def _check_sqlite_file(url: sa.URL, creating: bool) -> None:
    """A SQLite path that cannot be a results database is one line before anything is opened, so
    that a wrong --db changes nothing on disk: not a folder, not another kind of file, and (but for
    the default database in benchbase's own cache) in a folder that exists."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    path = Path(str(url.database))
    if path.is_dir():
        raise InputError(f"{path}: is a folder; --db names a SQLite file or a SQLAlchemy URL")
    if path.exists():
        _require_sqlite_header(path)
    elif not path.parent.is_dir():
        if not (creating and path == _default_file()):
            raise InputError(f"{path}: no such folder {path.parent} (create it, or name another --db)")
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not creating:
        raise InputError(f"{path}: no results database there (`benchbase results add` creates it)")


def _require_sqlite_header(path: Path) -> None:
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    if header and header != SQLITE_HEADER:
        raise InputError(f"{path}: not a SQLite database (a text file?); --db names a SQLite file or a SQLAlchemy URL")


@contextmanager
def _write_turn(url: sa.URL, connection: sa.Connection) -> Iterator[None]:
    """One transaction that holds the write lock from its start: SQLite's BEGIN IMMEDIATE
    (_sqlite_begin_for_writing), PostgreSQL's advisory lock, released when the transaction ends."""
    try:
        transaction = connection.begin()
        if connection.dialect.name == "postgresql":
            connection.execute(sa.select(sa.func.pg_advisory_xact_lock(WRITE_LOCK)))
    except sa.exc.OperationalError as error:  # a read-only file; another writer past WRITER_WAIT_S
        raise InputError(f"{describe(url)}: cannot write: {_first_line(error)}") from None
    with transaction:
        yield


def _upgrade(url: sa.URL, connection: sa.Connection) -> None:
    config = _alembic_config()
    config.attributes["connection"] = connection  # the migrations run on this connection, in its transaction
    try:
        command.upgrade(config, "head")
    except CommandError as error:  # a database a newer benchbase upgraded past this one's migrations
        raise InputError(f"{describe(url)}: cannot bring the results database to revision "
                         f"{_newest_revision()}: {error}") from None


def _connect(url: sa.URL, engine: sa.Engine) -> sa.Connection:
    try:
        return engine.connect()
    except sa.exc.OperationalError as error:
        raise InputError(f"{describe(url)}: cannot connect: {_first_line(error)}") from None


def _first_line(error: sa.exc.DBAPIError) -> str:
    return str(error.orig or error).strip().splitlines()[0]


def _require_newest(url: sa.URL, connection: sa.Connection) -> None:
    current = MigrationContext.configure(connection).get_current_revision()
    newest = _newest_revision()
    if current is None:
        raise InputError(f"{describe(url)}: not a benchbase results database (`benchbase results add` makes one)")
    if current != newest:
        raise InputError(f"{describe(url)}: the results database is at revision {current}, this benchbase reads "
                         f"{newest}; `benchbase results add` upgrades it")


def _engine(url: sa.URL, writing: bool) -> sa.Engine:
    try:
        if url.get_backend_name() != "sqlite":
            return sa.create_engine(url)
        engine = sa.create_engine(url, connect_args={"timeout": WRITER_WAIT_S})
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin_for_writing if writing else _sqlite_begin)
        return engine
    except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as error:
        raise InputError(f"{describe(url)}: cannot open ({error}; PostgreSQL needs `pip install "
                         "'benchbase[postgres]'`)") from None


def _sqlite_connect(connection: Any, _record: object) -> None:
    # pysqlite's own transactions begin only before INSERT, UPDATE and DELETE, so each CREATE TABLE
    # would commit at once: benchbase begins them itself (_sqlite_begin), and the schema is made
    # in one transaction or not at all. (SQLAlchemy's recipe for SQLite's transactional DDL.)
    connection.isolation_level = None
    # SQLite enforces foreign keys (and so the cascades) only when asked, per connection.
    connection.execute("PRAGMA foreign_keys=ON")


def _sqlite_begin(connection: sa.Connection) -> None:
    connection.exec_driver_sql("BEGIN")


def _sqlite_begin_for_writing(connection: sa.Connection) -> None:
    # IMMEDIATE takes the write lock now, not at the first write: a second writer waits here (up to
    # WRITER_WAIT_S) rather than read "no schema yet" and then collide with the first one's CREATE TABLE.
    # Readers still read the last committed state meanwhile, unlike under EXCLUSIVE.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _newest_revision() -> str | None:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _default_file() -> Path:
    from benchbase.data.workload_data import default_cache  # the data package loads only for the default path

    return (default_cache() / DEFAULT_NAME).expanduser().resolve()
