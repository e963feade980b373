"""conformer-mini's reference convergence points against the real runs behind them
(tests/data/rcp-conformer-mini/README.md says how they were made)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_helpers import run_benchbase

from benchbase.rcp.points import bundled_rcp

RUNS = Path(__file__).parent / "data" / "rcp-conformer-mini" / "torch-cpu"


def test_the_bundled_rcp_is_what_rcp_make_makes_of_the_reference_runs(tmp_path):
    made = tmp_path / "conformer-mini.json"
    finished = run_benchbase("rcp", "make", str(RUNS), "--out", str(made))
    assert finished.returncode == 0, finished.stderr[-2000:]
    bundled = json.loads(bundled_rcp("conformer-mini").read_text())
    remade = json.loads(made.read_text())
    assert {key: value for key, value in remade.items() if key != "made_by"} == {
        key: value for key, value in bundled.items() if key != "made_by"}
    runs = remade["batches"][0]["runs"]
    assert sorted(run["seed"] for run in runs) == list(range(10))
    assert remade["hyperparameters"]["opt_learning_rate_decay_schedule"] == "exponential"


def test_five_of_the_reference_runs_pass_their_own_rcp(tmp_path):
    """An honest set: the first five seeds, held to the RCP the ten make."""
    group = tmp_path / "torch-cpu"
    for seed in range(5):
        shutil.copytree(RUNS / f"seed-{seed}", group / f"seed-{seed}")
    checked = run_benchbase("rcp", "check", str(group), "--json")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    judged = json.loads(checked.stdout)["torch-cpu"]
    assert judged["passed"] and sorted(judged["targets"]) == ["CER 25", "CER 40", "WER 80"]
    assert all(target["passed"] and target["case"] == "RCP found" for target in judged["targets"].values())
