"""Resuming a killed run (`benchbase run --resume`): the same run, and a checker that says so.

One uninterrupted run and one that is SIGKILLed after its second checkpoint, whose newest
checkpoint is then torn, and resumed: the resumed run must pass over the torn checkpoint,
go on from the one before, and reach success with exactly the evaluations of the uninterrupted
run (one compute thread: PyTorch on a CPU is then deterministic).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_benchbase

from benchbase.telemetry.environment import host_label

pytestmark = pytest.mark.slow

SETTINGS = ("--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--seed", "5", "--target",
            "paper_cer=95", "--max-epochs", "12", "--checkpoint-every", "3")


def _run_arguments(store: Path, out: Path) -> list[str]:
    return ["run", *SETTINGS, "--data", str(store), "--out", str(out)]


def _evaluations(folder: Path) -> list[dict]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{"epoch": record["epoch"], "subsets": record["subsets"]} for record in records if record["kind"] == "eval"]


def _losses(folder: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {record["batch"]: record["loss"] for record in records if record["kind"] == "batch"}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, small_store) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    finished = run_benchbase(*_run_arguments(small_store, out), timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, small_store) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("resumed") / "run"
    process = subprocess.Popen([sys.executable, "-m", "benchbase", *_run_arguments(small_store, out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    second = out / "checkpoints" / "batch-0000006.ckpt.json"
    deadline = time.monotonic() + 300
    while not (second.exists() and _batches_written(out) >= 8):  # some work lost after the checkpoint
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never wrote its second checkpoint"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    newest = out / "checkpoints" / "batch-0000006.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # torn, as by a crash mid-write
    return out, run_benchbase("run", "--resume", str(out), timeout=900)


def _batches_written(out: Path) -> int:
    metrics = out / "metrics.jsonl"
    return metrics.read_text().count('"kind": "batch"') if metrics.exists() else 0


def test_the_resumed_run_evaluates_exactly_as_the_uninterrupted_one(uninterrupted, resumed):
    out, finished = resumed
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "passed over checkpoints/batch-0000006.ckpt: its checksum does not match its sidecar" in finished.stderr
    assert "from checkpoints/batch-0000003.ckpt (batch 3)" in " ".join(finished.stdout.split())
    result, reference = (json.loads((folder / "result.json").read_text()) for folder in (out, uninterrupted))
    assert result["status"] == reference["status"] == "success"
    assert _evaluations(out) == _evaluations(uninterrupted)
    assert _losses(out) == _losses(uninterrupted)
    assert [target["epoch"] for target in result["tta"].values()] == [
        target["epoch"] for target in reference["tta"].values()]
    assert result["final_evaluation"]["subsets"] == reference["final_evaluation"]["subsets"]


def test_the_clock_counts_the_lost_work_and_not_the_downtime(resumed):
    out, _ = resumed
    result = json.loads((out / "result.json").read_text())
    [resume] = result["resumes"]
    assert resume["checkpoint"] == "checkpoints/batch-0000003.ckpt" and resume["segment"] == 1
    interrupted = json.loads((out / "segments" / "1" / "metrics.jsonl").read_text().splitlines()[-1])["t"]
    assert resume["interrupted_at_s"] >= interrupted and resume["lost_s"] > 0
    log = [json.loads(line.partition(" ")[2]) for line in (out / "mllog.log").read_text().splitlines()]
    assert [event["key"] for event in log].count("run_start") == 1
    assert [event["key"] for event in log].count("run_stop") == 1
    evaluations = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                   if '"kind": "eval"' in line]
    assert evaluations[0]["t"] > resume["interrupted_at_s"]  # epoch 1 ended after the restart


def test_check_passes_the_resumed_run_and_says_it_resumed(resumed):
    out, _ = resumed
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]
    said = " ".join(checked.stdout.split())
    assert "resumed (line" in said and "from checkpoints/batch-0000003.ckpt" in said
    scored = run_benchbase("score", str(out))
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "Resumed runs" in " ".join(scored.stdout.split())
    # The resume names the machine that went on; result.json keeps the environment of the run's init.
    (resume,) = [json.loads(line.partition(" ")[2])["value"] for line in (out / "mllog.log").read_text().splitlines()
                 if '"benchbase_resume"' in line]
    result = json.loads((out / "result.json").read_text())
    assert resume["host"] == result["resumes"][0]["host"] == host_label()
    assert result["environment"] == json.loads((out / "config.json").read_text())["environment"]


def _forged(out: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "forged"
    shutil.copytree(out, copy)
    log = copy / "mllog.log"
    lines = log.read_text().splitlines(keepends=True)
    at = next(index for index, line in enumerate(lines) if '"benchbase_resume"' in line)
    event = json.loads(lines[at].partition(" ")[2])
    edit(event)
    lines[at] = ":::MLLOG " + json.dumps(event) + "\n"
    log.write_text("".join(lines))
    return copy


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda event: event["value"].update(checkpoint="checkpoints/batch-0000099.ckpt"),
     "which the log never wrote before it"),
    # Before the clock started, so before any checkpoint, however quickly the run reached its own
    # (a fixed 0.5 s passed once start-up took over a second).
    (lambda event: event["value"].update(interrupted_at_s=-5.0), "before its own checkpoint was written"),
    (lambda event: event["value"].update(segment=7), "segments/7/ is not in the folder"),
])
def test_check_fails_a_resume_that_does_not_hold_together(resumed, tmp_path, edit, expected):
    out, _ = resumed
    checked = run_benchbase("check", "--json", str(_forged(out, tmp_path, edit)))
    assert checked.returncode == 1
    [resumes] = [finding for finding in json.loads(checked.stdout)["logs"][0]["findings"]
                 if finding["rule"] == "resumes"]
    assert resumes["status"] == "fail" and any(expected in message for message in resumes["messages"])


def test_verify_fails_a_final_checkpoint_swapped_for_an_earlier_one(resumed, tmp_path):
    out, _ = resumed
    verified = run_benchbase("verify", str(out))  # the exported weights, by the reference model
    assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    copy = tmp_path / "swapped"
    shutil.copytree(out, copy)
    earlier = sorted((copy / "checkpoints").glob("batch-*.ckpt"))[0]  # the oldest the run kept
    shutil.copy(earlier, copy / "checkpoints" / "final.ckpt")
    refuted = run_benchbase("verify", str(copy), "--with-backend")
    assert refuted.returncode == 1, refuted.stdout + refuted.stderr[-2000:]
    assert "do not score what the final evaluation" in refuted.stdout


def test_resume_refuses_what_it_cannot_continue(uninterrupted, tmp_path):
    finished = run_benchbase("run", "--resume", str(uninterrupted))
    assert finished.returncode == 2 and "the run finished (result.json exists)" in finished.stderr
    with_options = run_benchbase("run", "--resume", str(uninterrupted), "--seed", "3")
    assert with_options.returncode == 2 and "drop --seed" in with_options.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = run_benchbase("run", "--resume", str(empty))
    assert missing.returncode == 2 and "config.json: not found" in missing.stderr
    copy = tmp_path / "no-checkpoints"
    shutil.copytree(uninterrupted, copy)
    (copy / "result.json").unlink()
    for checkpoint in (copy / "checkpoints").glob("batch-*"):
        checkpoint.unlink()
    unresumable = run_benchbase("run", "--resume", str(copy))
    assert unresumable.returncode == 2 and "no complete checkpoint to resume from" in unresumable.stderr
    assert len(unresumable.stderr.strip().splitlines()) == 1


def test_resume_refuses_other_software_than_the_run_started_with(uninterrupted, tmp_path):
    """A resume after an upgrade measured neither version, and its result.json would contradict
    its log: refused in one line, before the folder changes. Another host may go on."""
    copy = tmp_path / "upgraded"
    shutil.copytree(uninterrupted, copy)
    (copy / "result.json").unlink()
    config = json.loads((copy / "config.json").read_text())
    numpy_version = config["environment"]["packages"]["numpy"]
    config["environment"]["packages"]["numpy"] = "1.0.0"
    config["environment"]["host"] = "sha256:another-node"
    (copy / "config.json").write_text(json.dumps(config))
    log_before = (copy / "mllog.log").read_bytes()
    refused = run_benchbase("run", "--resume", str(copy))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip() == (
        f"benchbase: error: {copy / 'config.json'}: the run started with other software or hardware than this "
        f"resume has (packages.numpy: 1.0.0 -> {numpy_version}); resume it with what it started with, or start "
        "a new run")
    assert (copy / "mllog.log").read_bytes() == log_before and not (copy / "segments").exists()
