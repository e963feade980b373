"""A real ds2-mini run with the JAX backend, from the CLI: the harness's clock, log and checker
treat a third backend, written only against the public contract, like the other two."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_benchbase, run_ds2_mini

pytest.importorskip("jax")
pytest.importorskip("benchbase_jax_ds2")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, small_store):
    out = tmp_path_factory.mktemp("runs") / "jax"
    # A short run: two epochs of the small test store; the target stands for "the loop ran".
    return out, run_ds2_mini("jax", small_store, out, seed=1, target="paper_cer=5", max_epochs=2)


def test_the_jax_run_trains_evaluates_and_stops_at_its_epoch_limit(finished_run):
    out, finished = finished_run
    assert finished.returncode == 3, finished.stderr[-2000:]  # aborted at the limit, as asked
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "aborted" and result["stop_reason"] == "max_epochs" and result["epochs"] == 2
    assert result["backend"] == "jax" and result["parameter_count"] == 249_918
    assert result["last_evaluation"]["paper_cer"] <= 100
    assert result["cpu"]["within_budget"], result["cpu"]
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if '"kind": "batch"' in line]
    assert losses[-1] < losses[0]


def test_the_jax_run_passes_benchbase_check(finished_run):
    out, _ = finished_run
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]
