"""A conformer-mini run end to end from the CLI: the Conformer family through the same harness,
log, checker and verifier as ds2, on a store of its own features (80 log-mel bands, no MFCCs)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_benchbase
from official_checker import check_common_rules

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory, conformer_store):
    out = tmp_path_factory.mktemp("conformer") / "run"
    process = run_benchbase("run", "--workload", "conformer-mini", "--backend", "torch", "--hw", "cpu", "--data",
                            str(conformer_store), "--out", str(out), "--seed", "1", "--target", "paper_cer=5",
                            "--max-epochs", "3", timeout=900)
    return out, process


def test_a_conformer_run_trains_evaluates_and_stops_at_its_limit(finished):
    out, process = finished
    assert process.returncode == 3, process.stderr  # aborted at max epochs: the target is out of reach
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "aborted" and result["epochs"] == 3
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "eval"]
    assert len(losses) == 3 and losses[-1] < losses[0]  # the validation CTC loss on dev-clean falls
    assert result["parameter_count"] == 202_290  # conformer-mini at 80 features
    final = result["final_evaluation"]
    assert final["independent"]["agree"] and set(final["subsets"]) >= {"dev-clean", "test-clean"}


def test_every_evaluation_was_scored_independently_and_the_run_passes_verify(finished):
    out, _ = finished
    scores = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()
              if "benchbase_independent_score" in line]
    assert len(scores) == 4 and all(score["value"]["agree"] for score in scores)  # 3 evaluations and the final
    verified = run_benchbase("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "independent: re-scored by the reference model" in verified.stdout


def test_the_log_passes_check_and_the_official_common_rules(finished, tmp_path):
    out, _ = finished
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1/1 log(s) pass rule set 1.9" in " ".join(checked.stdout.split())
    logged = (out / "mllog.log").read_text()
    assert '"key": "opt_learning_rate_decay_schedule", "value": "exponential"' in logged
    passed, messages = check_common_rules(out / "mllog.log", tmp_path)
    assert passed, messages


def test_another_familys_store_is_refused_in_one_line(small_store, tmp_path):
    """ds2-mini's store holds 93 features (80 log-mel + 13 MFCCs): not conformer-mini's."""
    process = run_benchbase("run", "--workload", "conformer-mini", "--backend", "torch", "--hw", "cpu", "--data",
                            str(small_store), "--out", str(tmp_path / "run"), "--max-epochs", "1")
    assert process.returncode == 2 and process.stderr.strip().count("\n") == 0, process.stderr
    assert "features have 93 dimensions, workload 'conformer-mini' expects 80" in process.stderr
