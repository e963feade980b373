"""ds2-mini's reference convergence points against real runs: the logs of the reference runs
behind the bundled RCP file, honest TensorFlow and JAX sets that pass it, and two cheating
backends' sets (tests/cheating_backends.py) that it catches.

The runs are real ds2-mini runs on this project's synthetic corpus (tests/data/rcp/README.md
says how each set was made); only each run's mllog.log, config.json and result.json are kept,
which is everything `benchbase rcp` reads. Training one set costs 15 to 25 minutes on two
cores, so the tests judge the recorded runs instead of training them again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_benchbase

from benchbase.rcp.points import bundled_rcp

DATA = Path(__file__).parent / "data" / "rcp"


def _check(group: str) -> tuple[int, dict]:
    finished = run_benchbase("rcp", "check", str(DATA / group), "--json")
    return finished.returncode, json.loads(finished.stdout) if finished.stdout.strip() else {"stderr": finished.stderr}


def test_the_bundled_rcp_is_what_rcp_make_makes_of_the_reference_runs(tmp_path):
    made = tmp_path / "ds2-mini.json"
    finished = run_benchbase("rcp", "make", str(DATA / "torch-cpu"), "--out", str(made))
    assert finished.returncode == 0, finished.stderr[-2000:]
    bundled = json.loads(bundled_rcp("ds2-mini").read_text())
    remade = json.loads(made.read_text())
    # Only the command differs (its paths); the runs, their epochs and revisions are the same.
    assert {key: value for key, value in remade.items() if key != "made_by"} == {
        key: value for key, value in bundled.items() if key != "made_by"}
    assert len(remade["batches"][0]["runs"]) == 10


@pytest.mark.parametrize("group", ["tf-cpu", "jax-cpu"])
def test_honest_tensorflow_and_jax_sets_pass(group):
    code, report = _check(group)
    assert code == 0, report
    verdicts = report[group]["targets"]
    assert all(verdict["passed"] for verdict in verdicts.values()) and len(verdicts) == 5


@pytest.mark.parametrize("group", ["double_step-cpu", "dev_data-cpu"])
def test_the_cheaters_that_converge_faster_fail(group):
    code, report = _check(group)
    assert code == 1, report
    verdicts = report[group]["targets"]
    failed = [label for label, verdict in verdicts.items() if not verdict["passed"]]
    assert failed, verdicts
    for label in failed:
        verdict = verdicts[label]
        assert verdict["submission_mean"] < verdict["min_epochs"] and "faster" in verdict["explanation"]


@pytest.mark.parametrize(("group", "passes"), [("tf-cpu", True), ("double_step-cpu", False)])
def test_check_holds_a_whole_set_to_the_rcp(group, passes):
    # The kept files are no whole run folder (no metrics or decoded outputs), so the logs' own
    # findings fail; the RCP verdict on the set is what this test reads.
    finished = run_benchbase("check", str(DATA / group), "--json")
    assert finished.returncode == 1
    assert json.loads(finished.stdout)["rcp"][group]["passed"] is passes
