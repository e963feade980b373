"""An rnnt-mini run end to end from the CLI: the transducer family through the same harness, log,
checker and verifier as ds2, with the search and the loss computed by the harness."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_benchbase

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory, small_store):
    out = tmp_path_factory.mktemp("rnnt") / "run"
    process = run_benchbase("run", "--workload", "rnnt-mini", "--backend", "torch", "--hw", "cpu", "--data",
                            str(small_store), "--out", str(out), "--seed", "1", "--target", "paper_cer=5",
                            "--max-epochs", "3", timeout=900)
    return out, process


def test_a_transducer_run_trains_evaluates_and_stops_at_its_limit(finished):
    out, process = finished
    assert process.returncode == 3, process.stderr  # aborted at max epochs: the target is out of reach
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "aborted" and result["epochs"] == 3
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "eval"]
    assert len(losses) == 3 and losses[-1] < losses[0]  # the harness's transducer loss on dev-clean falls
    final = result["final_evaluation"]
    assert final["independent"]["agree"] and set(final["subsets"]) >= {"dev-clean", "test-clean"}


def test_every_evaluation_was_scored_independently_and_the_run_passes_check_and_verify(finished):
    out, _ = finished
    scores = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()
              if "benchbase_independent_score" in line]
    assert len(scores) == 4 and all(score["value"]["agree"] for score in scores)  # 3 evaluations and the final
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout
    verified = run_benchbase("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "independent: re-scored by the reference model" in verified.stdout


def test_a_bf16_transducer_run_is_scored_independently_within_bfloat16s_bound(tmp_path, small_store):
    """The backend's bf16 encoder projections agree with the reference's within the error model's
    bfloat16 bound (float32's is hundreds of times tighter than what bf16 moves), and the log passes."""
    out = tmp_path / "bf16"
    process = run_benchbase("run", "--workload", "rnnt-mini", "--backend", "torch", "--hw", "cpu", "--data",
                            str(small_store), "--out", str(out), "--precision", "bf16", "--max-epochs", "1",
                            timeout=900)
    assert process.returncode == 3, process.stderr
    final = json.loads((out / "result.json").read_text())["final_evaluation"]
    assert final["precision"] == "bf16" and final["independent"]["agree"]
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout
