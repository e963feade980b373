"""Every Python process benchbase starts runs the parent's benchbase, whatever the current directory.

The user starts `benchbase` (the installed console script) in a folder that holds another
`benchbase/` package: here a decoy that raises on import. The workers of a cpu2 run (started
through torch's launcher) and the runs of a sweep must import the benchbase the parent imported,
and the log must record that checkout's commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import benchbase
from benchbase.process_guard import PACKAGE_ROOT, child_python_environment

CHECKOUT = Path(benchbase.__file__).resolve().parents[1]
CONSOLE_SCRIPT = Path(sys.executable).parent / "benchbase"

end_to_end = pytest.mark.skipif(not CONSOLE_SCRIPT.exists() or not (CHECKOUT / ".git").exists(),
                                reason="needs the benchbase console script and benchbase run from a git checkout")


def _git(*arguments: str) -> str:
    return subprocess.run(["git", "-C", str(CHECKOUT), *arguments], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def decoy(tmp_path) -> Path:
    """A working directory whose benchbase/ package cannot be imported unnoticed."""
    folder = tmp_path / "elsewhere"
    (folder / "benchbase").mkdir(parents=True)
    (folder / "benchbase" / "__init__.py").write_text(
        "raise ImportError('the decoy benchbase in the current directory was imported')\n")
    (folder / "benchbase" / "__main__.py").write_text("raise SystemExit('the decoy benchbase ran')\n")
    return folder


def _benchbase(cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    """The console script, as the user starts it, in ``cwd`` (no inherited safe-path setting)."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONSAFEPATH"}
    return subprocess.run([str(CONSOLE_SCRIPT), *arguments], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=900)


def test_a_child_python_in_that_folder_imports_this_benchbase(decoy):
    code = "import benchbase; print(benchbase.__file__)"
    finished = subprocess.run([sys.executable, "-c", code], cwd=decoy, env=child_python_environment(),
                              capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert Path(finished.stdout.strip()) == Path(benchbase.__file__).resolve()


def test_a_benchbase_found_through_the_first_path_entry_goes_first_on_the_childs_path(monkeypatch, tmp_path):
    """`python -m benchbase` in an uninstalled checkout: the child's own first entry is gone, so
    the checkout goes first on its PYTHONPATH; a benchbase found further on is left as it is."""
    others = [entry for entry in sys.path[1:] if Path(entry or ".").resolve() != PACKAGE_ROOT]
    monkeypatch.setattr(sys, "path", [str(PACKAGE_ROOT), *others])
    if sys.flags.safe_path:  # no first entry of Python's own: the checkout is on no entry at all
        monkeypatch.setattr(sys, "path", others)
    child = child_python_environment({"PYTHONPATH": str(tmp_path), "KEPT": "1"})
    assert child == {"PYTHONPATH": f"{PACKAGE_ROOT}{os.pathsep}{tmp_path}", "KEPT": "1", "PYTHONSAFEPATH": "1"}

    monkeypatch.setattr(sys, "path", [str(tmp_path), *others, str(PACKAGE_ROOT)])
    assert child_python_environment({"PYTHONPATH": str(tmp_path)}) == {"PYTHONPATH": str(tmp_path),
                                                                        "PYTHONSAFEPATH": "1"}


def _recorded_commits(log: Path) -> list[object]:
    events = [json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines() if line.startswith(":::")]
    return [event["value"]["benchbase"]["commit"] for event in events if event["key"] == "benchbase_environment"]


def _assert_records_this_checkout(log: Path, head_before: str) -> None:
    # Others may commit while the run trains: the commit it ran is HEAD then, or one made since.
    head_after = _git("rev-parse", "HEAD")
    possible = {head_before, *_git("rev-list", f"{head_before}..{head_after}").split()}
    commits = _recorded_commits(log)
    assert len(commits) == 1 and commits[0] in possible, (commits, head_before, head_after)


@pytest.mark.slow
@end_to_end
def test_a_cpu2_run_from_a_folder_with_another_benchbase_runs_the_parents(decoy, small_store, tmp_path):
    head = _git("rev-parse", "HEAD")
    out = tmp_path / "run"
    finished = _benchbase(decoy, "run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2",
                          "--max-epochs", "1", "--no-final-eval", "--data", str(small_store), "--out", str(out))
    assert finished.returncode == 3, finished.stdout[-3000:] + finished.stderr[-3000:]  # aborted at max_epochs
    assert "decoy" not in finished.stdout + finished.stderr
    assert json.loads((out / "result.json").read_text())["world_size"] == 2
    _assert_records_this_checkout(out / "mllog.log", head)


@pytest.mark.slow
@end_to_end
def test_a_sweep_from_a_folder_with_another_benchbase_runs_the_parents(decoy, small_store, tmp_path):
    head = _git("rev-parse", "HEAD")
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({
        "name": "one", "workload": "ds2-mini", "backends": ["torch"], "profiles": ["cpu"], "seeds": [0],
        "set": ["workload.tta.window=1"], "targets": ["paper_cer=100"], "max_epochs": 1, "no_final_eval": True,
        "data": str(small_store)}))
    out = tmp_path / "sweep"
    finished = _benchbase(decoy, "sweep", str(path), "--out", str(out))
    logs = "".join(log.read_text() for log in out.rglob("seed-*.log"))
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:] + logs[-3000:]
    assert "decoy" not in logs
    record = json.loads((out / "sweep.json").read_text())
    assert [(run["status"], run["exit_code"]) for run in record["runs"]] == [("success", 0)]
    (log,) = out.rglob("mllog.log")
    _assert_records_this_checkout(log, head)
