"""The results database: real ds2-mini runs (tests/data/rcp/) into SQLite and into a throwaway
PostgreSQL server, read back by `results list`, `results compare`, `report --from-db` and Datasette."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from cli_helpers import benchbase_in_process
from real_parts import skip_unless_required

from benchbase.report.runs import load_groups
from benchbase.results_db import (
    add_paths,
    comparison_table,
    database_url,
    open_for_reading,
    open_for_writing,
    read_run_record,
    run_id,
    time_table,
)
from benchbase.results_db.schema import EVALUATIONS, METADATA, RUNS, SCORES, TTA
from benchbase.specs.result import TIME_PARTS

RUNS_DATA = Path(__file__).parent / "data" / "rcp"
SECOND_SYSTEM = "cpu-b"


def _copy_runs(source: Path, target: Path, seeds: range, system: str | None = None) -> Path:
    """Seeds ``seeds`` of a set of runs, copied; ``system``: the hardware profile config.json records."""
    for seed in seeds:
        copied = shutil.copytree(source / f"seed-{seed}", target / f"seed-{seed}")
        if system is not None:
            config = json.loads((copied / "config.json").read_text())
            config["hardware"]["name"] = system
            (copied / "config.json").write_text(json.dumps(config, indent=2))
    return target


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory) -> dict[str, Path]:
    """PyTorch's ten runs as two machines' five (the second's config.json names another profile),
    and TensorFlow's five on the first."""
    root = tmp_path_factory.mktemp("two-machines")
    return {"torch-cpu": _copy_runs(RUNS_DATA / "torch-cpu", root / "cpu" / "torch-cpu", range(5)),
            "torch-cpu-b": _copy_runs(RUNS_DATA / "torch-cpu", root / SECOND_SYSTEM / "torch-cpu", range(5, 10),
                                      SECOND_SYSTEM),
            "tf-cpu": _copy_runs(RUNS_DATA / "tf-cpu", root / "cpu" / "tf-cpu", range(5))}


# --- a throwaway PostgreSQL server ------------------------------------------------------------------------


def _postgres_programs() -> Path | None:
    """The folder of Debian's initdb and pg_ctl (/usr/lib/postgresql/VERSION/bin), or of those on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda path: int(path.parts[-3])
                   if path.parts[-3].isdigit() else 0)
    on_path = shutil.which("initdb")
    return found[-1].parent if found else Path(on_path).parent if on_path else None


def _server_user() -> str | None:
    """Who runs the server: PostgreSQL refuses root, so as root, the postgres user Debian's package adds."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        skip_unless_required("postgresql", "running as root and there is no postgres user to run a PostgreSQL "
                             "server as")


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[str]:
    """A server on a unix socket in a temporary folder (no TCP port), trusting local connections;
    the URL of its postgres database. Skips where PostgreSQL or psycopg is not installed."""
    programs = _postgres_programs()
    if programs is None:
        skip_unless_required("postgresql", "no PostgreSQL server installed (Debian: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401 - SQLAlchemy's driver for the URL below
    except ImportError:
        skip_unless_required("postgresql", "psycopg is not installed (pip install 'benchbase[postgres]')")
    user = _server_user()
    # A short path of its own: a unix socket's path may not exceed 107 bytes, and the server's user must enter it.
    folder = Path(tempfile.mkdtemp(prefix="benchbase-pg-"))
    if user is not None:
        account = pwd.getpwnam(user)
        os.chown(folder, account.pw_uid, account.pw_gid)

    def run(*command: str) -> None:
        subprocess.run(command, check=True, capture_output=True, text=True, user=user, timeout=120)

    try:
        run(str(programs / "initdb"), "-D", str(folder / "data"), "-U", "benchbase", "--auth=trust", "-E", "UTF8")
        run(str(programs / "pg_ctl"), "-D", str(folder / "data"), "-l", str(folder / "server.log"), "-w",
            "-o", f"-k {folder} -c listen_addresses='' -F", "start")
        yield f"postgresql+psycopg://benchbase@/postgres?host={folder}"
    finally:
        subprocess.run([str(programs / "pg_ctl"), "-D", str(folder / "data"), "-m", "immediate", "stop"],
                       capture_output=True, user=user, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def _fresh_postgres_database(server: str, name: str) -> str:
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return sa.make_url(server).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path) -> str:
    """An empty database of each kind: a SQLite file, or a new database on the throwaway server."""
    if request.param == "sqlite":
        return str(tmp_path / "results.sqlite")
    return _fresh_postgres_database(request.getfixturevalue("postgres_server"), f"results_{tmp_path.name[-20:]}")


# --- the commands --------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    """pytest-xdist's workers set COLUMNS=80, which `results` honours off a terminal: these tests read
    the table a pipe gets when nobody sets it (a test of COLUMNS sets its own)."""
    monkeypatch.delenv("COLUMNS", raising=False)


def _cli(capsys, *arguments: str) -> subprocess.CompletedProcess:
    """`benchbase ARGUMENTS` in this process (a subprocess would spend seconds importing): its exit
    code, its output and its errors, as a subprocess's."""
    code, out, err = benchbase_in_process(capsys, *arguments)
    return subprocess.CompletedProcess(arguments, code, out, err)


def test_two_machines_side_by_side(two_machines, database, capsys):
    added = _cli(capsys, "results", "add", str(two_machines["torch-cpu"]), str(two_machines["torch-cpu-b"]),
                 "--db", database)
    assert added.returncode == 0, added.stderr
    assert added.stdout.count("added 5 run(s), 0 already in the database") == 2

    listed = _cli(capsys, "results", "list", "--db", database)
    assert listed.returncode == 0, listed.stderr
    assert "10 run(s)" in listed.stdout and listed.stdout.count(SECOND_SYSTEM) == 5

    compared = _cli(capsys, "results", "compare", "--db", database, "--by", "system", "cpu", SECOND_SYSTEM)
    assert compared.returncode == 0, compared.stderr
    lines = compared.stdout.splitlines()
    assert any("cpu runs" in line and f"{SECOND_SYSTEM} runs" in line for line in lines), compared.stdout
    rows = [line for line in lines if line.startswith("│ ds2-mini")]
    assert len(rows) == 5 and all(row.count("5/5") == 2 for row in rows), compared.stdout


@pytest.mark.parametrize("columns", [None, "100"], ids=["unset", "100"])
def test_results_list_off_a_terminal_honours_columns(two_machines, tmp_path, capsys, monkeypatch, columns):
    database = str(tmp_path / "results.sqlite")
    assert _cli(capsys, "results", "add", str(two_machines["torch-cpu"]), "--db", database).returncode == 0
    monkeypatch.delenv("COLUMNS", raising=False)
    if columns is not None:
        monkeypatch.setenv("COLUMNS", columns)
    listed = _cli(capsys, "results", "list", "--db", database)
    widest = max(len(line) for line in listed.stdout.splitlines())
    assert listed.returncode == 0 and "5 run(s)" in listed.stdout, listed.stdout + listed.stderr
    # Unset, the table keeps its natural width (rich's 80 would fold each row); set, it fits what the user asked.
    assert widest <= 100 if columns else widest > 100, listed.stdout


def test_the_comparison_is_the_median_and_range_of_each_side(two_machines, tmp_path):
    url = database_url(str(tmp_path / "results.sqlite"))
    with open_for_writing(url) as connection:
        add_paths(connection, [two_machines["torch-cpu"], two_machines["torch-cpu-b"]])
    with open_for_reading(url) as connection:
        table = comparison_table(connection, "system", "cpu", SECOND_SYSTEM)
    rows = {row[2]: row for row in table.rows}
    for label, row in rows.items():
        for side, folder, cells in (("cpu", "torch-cpu", row[3:7]), (SECOND_SYSTEM, "torch-cpu-b", row[7:11])):
            minutes = sorted(group_run.tta_seconds(label) / 60 for group in load_groups([two_machines[folder]])
                             for group_run in group.runs)
            assert cells[1] == f"{minutes[2]:.2f} ({minutes[0]:.2f}-{minutes[-1]:.2f})", (side, label)
    assert list(rows) == ["CER 40", "CER 30", "CER 25", "WER 90", "WER 80"]


def test_adding_the_same_runs_again_adds_nothing(two_machines, database, capsys):
    folders = [str(two_machines["torch-cpu"]), str(two_machines["tf-cpu"])]
    assert _cli(capsys, "results", "add", *folders, "--db", database).returncode == 0
    counts = _row_counts(database)
    again = _cli(capsys, "results", "add", *folders, "--db", database)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("added 0 run(s), 5 already in the database") == 2
    assert _row_counts(database) == counts
    assert counts["runs"] == 10 and counts["scores"] == 10  # two groups of five targets


def test_a_run_that_ended_on_a_nan_is_stored_and_read_back(two_machines, database, tmp_path, capsys):
    [run] = _copy_runs(two_machines["tf-cpu"], tmp_path / "nan", range(1)).iterdir()
    result = json.loads((run / "result.json").read_text())
    result["last_evaluation"]["loss"] = float("nan")
    (run / "result.json").write_text(json.dumps(result))  # NaN, as result.json writes it
    assert _cli(capsys, "results", "add", str(run), "--db", database).returncode == 0
    with open_for_reading(database_url(database)) as connection:
        [stored] = connection.execute(sa.select(RUNS.c.result)).scalars()
    assert stored["last_evaluation"]["loss"] == "NaN"
    reported = _cli(capsys, "report", "--from-db", database, "--no-figures", "--out", str(tmp_path / "report"))
    assert reported.returncode == 0, reported.stderr


def documented_query(joining: str = "tta") -> str:
    """docs/results-database.md's example query that joins ``joining`` to runs, as a reader would paste it."""
    lines = (Path(__file__).parent.parent / "docs" / "results-database.md").read_text().splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith("    select ")]
    blocks = [lines[start:next(index for index in range(start, len(lines)) if not lines[index].startswith("    "))]
              for start in starts]
    [block] = [block for block in blocks if any(f"from runs join {joining} " in line for line in block)]
    return "\n".join(line[4:] for line in block)


def test_the_documented_query_counts_only_the_runs_that_reached_the_target(two_machines, tmp_path, capsys):
    runs = _copy_runs(two_machines["tf-cpu"], tmp_path / "tf-cpu", range(5))
    result_file = runs / "seed-0" / "result.json"
    result = json.loads(result_file.read_text())  # seed 0 stopped at its epoch limit short of WER 80
    result["tta"]["WER 80"], result["status"] = None, "aborted"
    result_file.write_text(json.dumps(result))
    database = str(tmp_path / "results.sqlite")
    assert _cli(capsys, "results", "add", str(runs), "--db", database).returncode == 0
    with open_for_reading(database_url(database)) as connection:
        [row] = connection.execute(sa.text(documented_query())).mappings()
    reached = [json.loads((runs / f"seed-{seed}" / "result.json").read_text())["tta"]["WER 80"]["seconds"]
               for seed in range(1, 5)]
    assert (row["workload"], row["backend"], row["system"], row["reached"]) == ("ds2-mini", "tf", "cpu", 4)
    assert row["fastest_minutes"] == pytest.approx(min(reached) / 60)
    assert row["slowest_minutes"] == pytest.approx(max(reached) / 60)


def _row_counts(database: str) -> dict[str, int]:
    with open_for_reading(database_url(database)) as connection:
        return {table.name: connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
                for table in METADATA.sorted_tables}


def test_compare_by_backend_holds_the_system_fixed(two_machines, tmp_path, capsys):
    database = str(tmp_path / "results.sqlite")
    _cli(capsys, "results", "add", *(str(path) for path in two_machines.values()), "--db", database)
    compared = _cli(capsys, "results", "compare", "--db", database, "--by", "backend", "torch", "tf")
    assert compared.returncode == 0, compared.stderr
    assert len([line for line in compared.stdout.splitlines() if line.startswith("│ ds2-mini │    cpu")]) == 5
    assert f"Not compared: {SECOND_SYSTEM} on ds2-mini has runs of torch only." in compared.stdout


def test_a_run_is_stored_as_its_log_and_result_state_it(two_machines, tmp_path):
    [group] = load_groups([two_machines["torch-cpu"]])
    run = group.runs[0]
    record = read_run_record(run, imported_at=_now())
    assert record.run_id == run_id(run.path) == hashlib.sha256(
        (run.path / "mllog.log").read_bytes() + b"\0" + (run.path / "config.json").read_bytes() + b"\0").hexdigest()
    assert (record.run["workload"], record.run["backend"], record.run["system"], record.run["precision"],
            record.run["division"]) == ("ds2-mini", "torch", "cpu", "fp32", "closed")
    scored = [item for item in record.evaluations if item["subset"] == "dev-clean"]
    assert len(scored) == run.result.epochs
    times = [item["run_seconds"] for item in scored]
    assert times == sorted(times)
    for label, reached in run.result.tta.items():
        at = next(item for item in scored if item["epoch"] == reached["epoch"])
        assert at["run_seconds"] == pytest.approx(reached["seconds"], abs=1.0), label  # wall clock vs perf_counter
    assert record.run["final_wer"] == run.result.last_evaluation["wer"] and record.run["final_from"] == "last"
    environment = {item["key"]: item["value"] for item in record.environment}
    assert environment["packages.torch"] == run.result.environment["packages"]["torch"]


def _now() -> datetime:
    return datetime.now(UTC)


def test_the_migrations_make_the_schema_the_code_reads(tmp_path):
    url = database_url(str(tmp_path / "results.sqlite"))
    with open_for_writing(url) as connection:
        assert compare_metadata(MigrationContext.configure(connection), METADATA) == []
        assert {table.name for table in METADATA.sorted_tables} <= set(sa.inspect(connection).get_table_names())


def test_report_from_the_database_scores_as_from_the_folders(two_machines, tmp_path, capsys):
    database = str(tmp_path / "results.sqlite")
    folder = two_machines["torch-cpu"]
    _cli(capsys, "results", "add", str(folder), "--db", database)
    from_folders = _cli(capsys, "report", str(folder), "--no-figures", "--out", str(tmp_path / "a"))
    from_database = _cli(capsys, "report", "--from-db", database, "--no-figures", "--out", str(tmp_path / "b"))
    assert from_folders.returncode == 0 and from_database.returncode == 0, from_database.stderr
    assert (tmp_path / "b" / "tta-minutes.csv").read_text() == (tmp_path / "a" / "tta-minutes.csv").read_text()


def test_the_default_database_is_in_the_cache(two_machines, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCHBASE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BENCHBASE_RESULTS", raising=False)
    added = _cli(capsys, "results", "add", str(two_machines["tf-cpu"]))
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "cache" / "results.sqlite").is_file()


def test_reading_a_database_that_is_not_there_is_one_line(tmp_path, capsys):
    missing = tmp_path / "nothing.sqlite"
    listed = _cli(capsys, "results", "list", "--db", str(missing))
    assert listed.returncode == 2
    assert listed.stderr.strip() == (f"benchbase: error: {missing}: no results database there (`benchbase results "
                                     "add` creates it)")
    assert not missing.exists()


def test_a_path_without_runs_writes_nothing(tmp_path, capsys):
    database = tmp_path / "results.sqlite"
    added = _cli(capsys, "results", "add", str(tmp_path), "--db", str(database))
    assert added.returncode == 2
    assert added.stderr.strip() == f"benchbase: error: {tmp_path}: no result.json in it or in its run folders"
    assert not database.exists()


def test_comparing_a_system_the_database_lacks_names_those_it_has(two_machines, tmp_path, capsys):
    database = str(tmp_path / "results.sqlite")
    _cli(capsys, "results", "add", str(two_machines["tf-cpu"]), "--db", database)
    compared = _cli(capsys, "results", "compare", "--db", database, "--by", "system", "cpu", "sys1")
    assert compared.returncode == 2
    assert "no runs of system 'sys1' in the results database; systems there: cpu" in compared.stderr


def test_a_closed_group_is_stored_with_its_scores_and_rcp_verdicts(two_machines, tmp_path):
    url = database_url(str(tmp_path / "results.sqlite"))
    with open_for_writing(url) as connection:
        add_paths(connection, [two_machines["tf-cpu"]])
    with open_for_reading(url) as connection:
        verdicts = connection.execute(sa.text("select target, passed from rcp_verdicts")).all()
        scores = connection.execute(sa.select(SCORES.c.target, SCORES.c.runs)).all()
        evaluations = connection.execute(sa.select(sa.func.count()).select_from(EVALUATIONS)).scalar_one()
        reached = connection.execute(sa.select(sa.func.count()).select_from(TTA)
                                     .where(TTA.c.seconds.is_not(None))).scalar_one()
    assert sorted(target for target, _ in verdicts) == sorted(target for target, _ in scores)
    assert {runs for _, runs in scores} == {5}
    assert evaluations > 0 and reached == 25


# --- Datasette ---------------------------------------------------------------------------------------------


def test_datasette_serves_the_file_read_only(two_machines, tmp_path):
    app = pytest.importorskip("datasette.app", reason="datasette is not installed (pip install datasette)")
    path = tmp_path / "results.sqlite"
    with open_for_writing(database_url(str(path))) as connection:
        add_paths(connection, [two_machines["torch-cpu"], two_machines["torch-cpu-b"]])
    before = path.read_bytes()
    datasette = app.Datasette(immutables=[str(path)])
    query = "select system, count(*) as runs from runs group by system order by system"

    async def browse():
        runs = await datasette.client.get("/results/runs.json?_shape=array&_size=max")
        grouped = await datasette.client.get("/results.json", params={"sql": query, "_shape": "array"})
        return runs, grouped

    runs, grouped = asyncio.run(browse())
    assert runs.status_code == 200 and len(runs.json()) == 10
    assert grouped.json() == [{"system": "cpu", "runs": 5}, {"system": SECOND_SYSTEM, "runs": 5}]
    assert not datasette.databases["results"].is_mutable
    assert path.read_bytes() == before


def test_runs_table_has_a_column_for_everything_a_run_is_filed_under():
    assert {"run_id", "workload", "backend", "system", "seed", "division", "status", "precision",
            "benchbase_version", "benchbase_commit", "started_at"} <= set(RUNS.c.keys())


# --- faults: a killed import, imports at once, a wrong --db, a killed run --------------------------------

KILLED_AFTER_CREATING_RUNS = """
import os, signal, sys
import sqlalchemy as sa
from benchbase.cli import main

def die_after_creating_runs(connection, cursor, statement, *rest):
    if statement.lstrip().upper().startswith("CREATE TABLE RUNS"):
        os.kill(os.getpid(), signal.SIGKILL)  # as a kill -9 (or a SIGTERM) midway through the first import

sa.event.listen(sa.Engine, "after_cursor_execute", die_after_creating_runs)
main(["results", "add", *sys.argv[2:], "--db", sys.argv[1]])
"""

ADD_AT_THE_SIGNAL = """
import sys, time
from pathlib import Path
import sqlalchemy as sa
import benchbase.cli, benchbase.results_db.importing  # imported before the start, so that the adds meet
from benchbase.cli import main

looked = []

def linger_after_looking_for_the_schema(connection, cursor, statement, parameters, *rest):
    # Widens the race: every add sees no schema yet before any of them makes it, unless they take turns.
    if not looked and "alembic_version" in f"{statement} {parameters}":
        looked.append(statement)
        time.sleep(1)

sa.event.listen(sa.Engine, "after_cursor_execute", linger_after_looking_for_the_schema)
ready, start = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not start.exists():
    time.sleep(0.001)
main(["results", "add", *sys.argv[4:], "--db", sys.argv[3]])
"""


def _python(script: str, *arguments: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *arguments], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **options)


def test_an_import_killed_while_making_the_schema_leaves_a_usable_store(two_machines, database, capsys):
    folder = str(two_machines["tf-cpu"])
    killed = _python(KILLED_AFTER_CREATING_RUNS, database, folder)
    _, stderr = killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL, stderr[-2000:]  # it did die midway, after CREATE TABLE runs
    added = _cli(capsys, "results", "add", folder, "--db", database)
    assert added.returncode == 0, added.stderr[-2000:]
    assert "added 5 run(s), 0 already in the database" in added.stdout
    assert _row_counts(database)["runs"] == 5


def test_imports_at_the_same_moment_into_a_new_store_each_add_every_run_once(database, tmp_path, capsys):
    importers = 4
    folders = _copy_runs(RUNS_DATA / "torch-cpu", tmp_path / "runs", range(importers))
    start = tmp_path / "start"
    processes = []
    for index in range(importers):  # each adds its own run and the next one's: every run from two at once
        ready = tmp_path / f"ready-{index}"
        runs = [str(folders / f"seed-{seed % importers}") for seed in (index, index + 1)]
        processes.append((ready, _python(ADD_AT_THE_SIGNAL, str(ready), str(start), database, *runs)))
    deadline = time.monotonic() + 120
    while not all(ready.exists() for ready, _ in processes) and time.monotonic() < deadline:
        time.sleep(0.01)
    start.touch()
    for _, process in processes:
        _, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr[-3000:]
    counts = _row_counts(database)
    assert counts["runs"] == importers and counts["run_groups"] == importers
    listed = _cli(capsys, "results", "list", "--db", database)
    assert f"{importers} run(s)" in listed.stdout


@pytest.mark.parametrize(("make", "words"), [
    (lambda path: path.write_text("not a database\n"), "not a SQLite database"),
    (lambda path: path.mkdir(), "is a folder"),
    (lambda path: None, "no such folder"),
], ids=["a-text-file", "a-folder", "in-a-missing-folder"])
def test_a_database_path_that_cannot_be_one_is_one_line_and_creates_nothing(two_machines, tmp_path, capsys, make,
                                                                            words):
    given = tmp_path / "given.sqlite"
    make(given)
    if not given.exists():
        given = tmp_path / "no" / "such" / "folder" / "results.sqlite"
    before = sorted(tmp_path.rglob("*"))
    for command in (["results", "add", str(two_machines["tf-cpu"])], ["results", "list"]):
        found = _cli(capsys, *command, "--db", str(given))
        assert found.returncode == 2, found.stderr
        [line] = found.stderr.strip().splitlines()
        assert line.startswith(f"benchbase: error: {given}: ") and words in line, line
    assert sorted(tmp_path.rglob("*")) == before
    if given.is_file():
        assert given.read_text() == "not a database\n"


def test_the_readme_commands_work_as_written(two_machines, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCHBASE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BENCHBASE_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert _cli(capsys, "results", "add", str(two_machines["torch-cpu"])).returncode == 0
    assert _cli(capsys, "results", "list").returncode == 0
    reported = _cli(capsys, "report", "--from-db", "results.sqlite", "--no-figures", "--out", "report/")
    assert reported.returncode == 0, reported.stderr
    assert (tmp_path / "report" / "tta-minutes.csv").is_file()
    assert not (tmp_path / "results.sqlite").exists()


def test_a_killed_run_named_directly_is_left_out_and_named(two_machines, tmp_path, capsys):
    killed = shutil.copytree(two_machines["tf-cpu"] / "seed-0", tmp_path / "killed")
    (killed / "result.json").unlink()  # killed before it wrote its result
    database = str(tmp_path / "results.sqlite")
    added = _cli(capsys, "results", "add", str(killed), str(two_machines["tf-cpu"]), "--db", database)
    assert added.returncode == 0, added.stderr
    said = " ".join(added.stdout.split())
    assert f"left out: {killed} has no result.json" in said and "added 5 run(s)" in said
    assert _row_counts(database)["runs"] == 5


def _open_local_sgd_runs(target: Path) -> Path:
    """PyTorch's seeds 5-9 on the second system as open local_sgd runs on 4 devices."""
    runs = _copy_runs(RUNS_DATA / "torch-cpu", target, range(5, 10), SECOND_SYSTEM)
    for folder in runs.iterdir():
        config = json.loads((folder / "config.json").read_text())
        config.update(division="open", strategy={"name": "local_sgd", "sync_every": 4})
        (folder / "config.json").write_text(json.dumps(config))
        result = json.loads((folder / "result.json").read_text())
        result.update(division="open", world_size=4, device_plan={**result["device_plan"], "count": 4})
        (folder / "result.json").write_text(json.dumps(result))
    return runs


def test_a_comparison_marks_runs_of_another_division_strategy_or_device_count(two_machines, tmp_path, capsys):
    database = str(tmp_path / "results.sqlite")
    url = database_url(database)
    with open_for_writing(url) as connection:
        add_paths(connection, [two_machines["torch-cpu"], _open_local_sgd_runs(tmp_path / "open" / "torch-cpu")])
    with open_for_reading(url) as connection:
        table = comparison_table(connection, "system", "cpu", SECOND_SYSTEM)
    assert table.headers[-1] == "differs" and len(table.rows) == 5
    assert {row[0] for row in table.rows} == {"ds2-mini"}
    assert all(row[-1] == "division, strategy, devices" for row in table.rows)
    held = table.rows[0][1]
    assert (f"Not like with like (division, strategy, devices): {held} on ds2-mini: cpu: closed, sync, 1 device; "
            f"{SECOND_SYSTEM}: open, local_sgd, 4 devices.") in table.notes
    compared = _cli(capsys, "results", "compare", "--db", database, "--by", "system", "cpu", SECOND_SYSTEM)
    assert compared.returncode == 0 and "Not like with like" in compared.stdout, compared.stderr


def test_a_comparison_of_like_with_like_has_no_differs_column(two_machines, tmp_path):
    url = database_url(str(tmp_path / "results.sqlite"))
    with open_for_writing(url) as connection:
        add_paths(connection, [two_machines["torch-cpu"], two_machines["torch-cpu-b"]])
    with open_for_reading(url) as connection:
        table = comparison_table(connection, "system", "cpu", SECOND_SYSTEM)
    assert "differs" not in table.headers and not any("like with like" in note for note in table.notes)


def test_an_older_database_gains_the_time_parts_of_the_runs_it_holds(tmp_path):
    from alembic import command

    from benchbase.results_db.store import _alembic_config

    url = database_url(str(tmp_path / "results.sqlite"))
    breakdown = {"wall_s": 10.0, "stages": "reported", "seconds": {"forward": 6.0, "evaluation": 4.0},
                 "fractions": {"forward": 0.6, "evaluation": 0.4}}
    result = {"status": "success", "time_breakdown": breakdown, "compute": {"padding_fraction": 0.25,
                                                                           "mfu_hardware": None, "mfu_useful": None}}
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # the schema as benchbase 0.3.0 left it, with one run in it
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
        runs = sa.Table("runs", sa.MetaData(), autoload_with=connection)
        connection.execute(runs.insert().values(run_id="a" * 64, workload="ds2-mini", result=result))
    engine.dispose()
    with open_for_writing(url):  # what `results add` does first
        pass
    with open_for_reading(url) as connection:
        [row] = time_table(connection).rows
    parts = dict(zip(TIME_PARTS, row[5:-4], strict=True))
    assert parts["forward"] == pytest.approx(60) and parts["evaluation"] == pytest.approx(40)
    assert row[-4:] == ["reported", pytest.approx(25), None, None]
