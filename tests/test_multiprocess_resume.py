"""Signals and resume for a run of several processes (`--hw cpu2`: two workers started through
torch's launcher).

A cpu2 run killed outright (SIGKILL of the launcher and both workers, as a machine lost without
notice) after its third checkpoint, with rank 1's file of the newest checkpoint then torn, is
resumed: it passes over that checkpoint, goes on from the one before, and trains the batches and
evaluates exactly as an uninterrupted run (one thread per process: gloo's sum of two ranks and
PyTorch on a CPU are deterministic), under sync and under ADPSGD, where the two learners hold
different weights and each goes on from its own. SIGTERM and Ctrl-C (SIGINT) of the launcher end
it in one line with 143 and 130, leaving no process behind and a checkpoint of every rank to
resume from; a sweep stopped by SIGTERM says "interrupted" and resumes the run when run again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import torch
import yaml
from cli_helpers import run_benchbase, start_two_torchrun_nodes, two_torchrun_nodes

from benchbase.data.integrity import file_digest
from benchbase.errors import InputError
from benchbase.harness.recorder import RunRecorder
from benchbase.harness.resume import find_resume_point, write_sidecar
from benchbase.harness.resume_state import ResumeState, TrackerState
from benchbase.run_folder import RunFolder

SETTINGS = ("--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2", "--seed", "5", "--max-epochs", "2",
            "--checkpoint-every", "2", "--no-final-eval")
STRATEGIES = {"sync": (), "adpsgd": ("--strategy", "adpsgd", "--set", "strategy.peer=random")}


def _run_arguments(store: Path, out: Path, strategy: str) -> list[str]:
    return ["run", *SETTINGS, *STRATEGIES[strategy], "--data", str(store), "--out", str(out)]


def _start(store: Path, out: Path, strategy: str = "sync") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchbase", *_run_arguments(store, out, strategy)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(condition, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, (process.communicate()[1] or "")[-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _batches_written(out: Path) -> int:
    metrics = out / "metrics.jsonl"
    return metrics.read_text().count('"kind": "batch"') if metrics.exists() else 0


def _trained(folder: Path) -> tuple[dict[int, float], list[dict]]:
    """Every batch's loss, and every evaluation's rates on every subset."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    losses = {record["batch"]: record["loss"] for record in records if record["kind"] == "batch"}
    return losses, [{"epoch": record["epoch"], "subsets": record["subsets"]}
                    for record in records if record["kind"] == "eval"]


def _events(folder: Path) -> list[dict]:
    return [json.loads(line.partition(" ")[2]) for line in (folder / "mllog.log").read_text().splitlines()]


def _assert_trained_alike(resumed: Path, uninterrupted: Path) -> None:
    assert _trained(resumed) == _trained(uninterrupted)
    result, reference = (json.loads((folder / "result.json").read_text()) for folder in (resumed, uninterrupted))
    assert result["status"] == reference["status"] and result["world_size"] == 2
    assert _reached(result) == _reached(reference)
    assert len(result["resumes"]) == 1


def _reached(result: dict) -> dict[str, int | None]:
    """The epoch of each target's TTA (None: not reached)."""
    return {label: None if tta is None else tta["epoch"] for label, tta in result["tta"].items()}


def _assert_check_passes_and_says_resumed(out: Path) -> None:
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "resumed (line" in " ".join(checked.stdout.split())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, small_store) -> Callable[[str], Path]:
    """One uninterrupted run per strategy, made when a test first asks for it."""
    made: dict[str, Path] = {}

    def run(strategy: str) -> Path:
        if strategy not in made:
            out = tmp_path_factory.mktemp(f"uninterrupted-{strategy}") / "run"
            finished = run_benchbase(*_run_arguments(small_store, out, strategy), timeout=600)
            assert finished.returncode == 3, finished.stderr[-3000:]  # aborted at max_epochs: a status
            made[strategy] = out
        return made[strategy]

    return run


# --- a run killed outright, resumed --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["sync", "adpsgd"])
def test_a_killed_run_of_two_processes_resumes_to_exactly_the_uninterrupted_run(uninterrupted, small_store,
                                                                                  tmp_path, strategy):
    out = tmp_path / "run"
    process = _start(small_store, out, strategy)
    sixth = out / "checkpoints" / "batch-0000006.ckpt.json"
    _wait_for(lambda: sixth.exists() and _batches_written(out) >= 7, process)  # some work lost after it
    everyone = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    for member in everyone:  # no Python cleanup anywhere: no run_stop, no checkpoint on the way out
        member.kill()
    process.communicate(timeout=30)
    _, alive = psutil.wait_procs(everyone, timeout=10)
    assert not alive
    checkpoints = out / "checkpoints"
    assert (checkpoints / "batch-0000006.rank-1.ckpt").is_file()
    if strategy == "adpsgd":  # each learner's weights are its own: rank 0's checkpoint alone could not resume
        learners = [torch.load(checkpoints / name, weights_only=True)["model"]
                    for name in ("batch-0000006.ckpt", "batch-0000006.rank-1.ckpt")]
        assert any(not torch.equal(learners[0][name], learners[1][name]) for name in learners[0])
    torn = checkpoints / "batch-0000006.rank-1.ckpt"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])  # as by a crash mid-write

    resumed = run_benchbase("run", "--resume", str(out), timeout=600)

    assert resumed.returncode == 3, resumed.stderr[-3000:]
    assert ("passed over checkpoints/batch-0000006.ckpt: rank 1's batch-0000006.rank-1.ckpt does not match its "
            "sidecar") in resumed.stderr
    assert "from checkpoints/batch-0000004.ckpt (batch 4)" in " ".join(resumed.stdout.split())
    _assert_trained_alike(out, uninterrupted(strategy))
    # Every checkpoint the resumed run wrote names rank 1's beside rank 0's, and both are kept.
    periodic = [event for event in _events(out) if event["key"] == "benchbase_checkpoint"
                and not event["metadata"].get("final")]
    assert periodic[-1]["metadata"]["rank_checkpoints"] == [periodic[-1]["value"].replace(".ckpt", ".rank-1.ckpt")]
    assert sorted(path.name for path in checkpoints.glob("batch-*")) == [
        "batch-0000008.ckpt", "batch-0000008.ckpt.json", "batch-0000008.rank-1.ckpt",
        "batch-0000010.ckpt", "batch-0000010.ckpt.json", "batch-0000010.rank-1.ckpt"]
    _assert_check_passes_and_says_resumed(out)


# --- signals --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("stop", "code", "line"), [(signal.SIGTERM, 143, "benchbase: error: terminated (SIGTERM)"),
                                                    (signal.SIGINT, 130, "benchbase: error: interrupted (Ctrl-C)")],
                         ids=["sigterm", "sigint"])
def test_a_signal_stops_a_run_of_two_processes_in_one_line_and_it_resumes(uninterrupted, small_store, tmp_path,
                                                                          stop, code, line):
    """The signal goes to the launcher alone, as Ctrl-C in a terminal or a scheduler's SIGTERM
    reaches it (the workers lead their own sessions); the launcher passes it on."""
    out = tmp_path / "run"
    process = _start(small_store, out)
    _wait_for(lambda: any((out / "checkpoints").glob("*.ckpt.json")) and _batches_written(out) >= 3, process)
    everyone = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(stop)
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == code, stderr[-3000:]
    assert stderr.strip().splitlines() == [line], stderr[-3000:]  # no traceback, no word from the workers
    _, alive = psutil.wait_procs(everyone, timeout=10)
    assert not alive, [member.cmdline() for member in alive]
    events = _events(out)
    assert events[-1]["key"] == "run_stop"
    assert events[-1]["metadata"]["status"] == "aborted" and events[-1]["metadata"]["stop_reason"] == "interrupted"
    # Every rank stopped at the same batch and checkpointed it.
    [last] = [event for event in events if event["key"] == "benchbase_checkpoint"][-1:]
    assert last["metadata"]["terminated"] is True
    assert (out / last["value"]).is_file() and (out / last["metadata"]["rank_checkpoints"][0]).is_file()

    resumed = run_benchbase("run", "--resume", str(out), timeout=600)
    assert resumed.returncode == 3, resumed.stderr[-3000:]
    _assert_trained_alike(out, uninterrupted("sync"))
    _assert_check_passes_and_says_resumed(out)


@pytest.mark.slow
def test_a_run_on_two_torchrun_machines_stopped_by_sigterm_resumes_to_the_uninterrupted_run(uninterrupted,
                                                                                             small_store, tmp_path):
    """Two torchrun invocations ("machines", one process each, meeting on 127.0.0.1) both get
    SIGTERM, as a cluster preempting the job sends it to every node's agent. The same two torchrun
    commands with `run --resume OUT` go on, and the run trains and evaluates exactly as the
    uninterrupted cpu2 run of benchbase's own launcher: the same plan, two ranks, gloo."""
    out = tmp_path / "run"
    nodes = start_two_torchrun_nodes([*SETTINGS, "--data", str(small_store), "--out", str(out)])
    try:
        deadline = time.monotonic() + 300
        while not (any((out / "checkpoints").glob("*.ckpt.json")) and _batches_written(out) >= 3):
            assert all(node.poll() is None for node in nodes), [node.communicate()[1][-2000:] for node in nodes]
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)
        for node in nodes:
            node.send_signal(signal.SIGTERM)
        stopped = [node.communicate(timeout=120) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    codes = [node.returncode for node in nodes]
    assert codes[0] == codes[1] != 0, (codes, [stderr[-2000:] for _, stderr in stopped])
    last = [event for event in _events(out) if event["key"] == "benchbase_checkpoint"][-1]
    assert last["metadata"]["terminated"] is True  # every rank checkpointed the batch it stopped at

    resumed = two_torchrun_nodes(["--resume", str(out)])
    assert [code for code, *_ in resumed] == [0, 0], [stderr[-2000:] for _, _, stderr, _ in resumed]
    _assert_trained_alike(out, uninterrupted("sync"))
    _assert_check_passes_and_says_resumed(out)


@pytest.mark.slow
def test_a_sweep_of_two_process_runs_stopped_by_sigterm_says_interrupted_and_resumes_it(small_store, tmp_path):
    spec = {"name": "cpu2", "workload": "ds2-mini", "backends": ["torch"], "profiles": ["cpu2"], "seeds": [0],
            "max_epochs": 2, "checkpoint_every": 2, "no_final_eval": True, "data": str(small_store)}
    path, out = tmp_path / "sweep.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(spec))
    sweep = subprocess.Popen([sys.executable, "-m", "benchbase", "sweep", str(path), "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    run = out / "torch-cpu2" / "seed-0"
    _wait_for(lambda: any((run / "checkpoints").glob("*.ckpt.json")), sweep)
    everyone = psutil.Process(sweep.pid).children(recursive=True)
    os.killpg(sweep.pid, signal.SIGTERM)  # the sweep's process group, as a scheduler stops a job
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 143, output[-3000:]
    assert output.strip().splitlines()[-1].startswith("benchbase: error: sweep interrupted (SIGTERM) at "
                                                      "torch-cpu2/seed-0")
    _, alive = psutil.wait_procs(everyone, timeout=10)
    assert not alive, [member.cmdline() for member in alive]
    [entry] = json.loads((out / "sweep.json").read_text())["runs"]
    assert (entry["status"], entry["exit_code"]) == ("interrupted", 143)

    again = run_benchbase("sweep", str(path), "--out", str(out), timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    [entry] = json.loads((out / "sweep.json").read_text())["runs"]
    assert [(attempt["action"], attempt["exit_code"]) for attempt in entry["attempts"]] == [("start", 143),
                                                                                            ("resume", 3)]
    assert not (out / ".abandoned").exists()
    assert len(json.loads((run / "result.json").read_text())["resumes"]) == 1


# --- which checkpoint is complete -------------------------------------------------------------------


def _state(batch: int) -> ResumeState:
    return ResumeState(batch_index=batch, epoch=1, batches_done_in_epoch=batch, train_samples=32 * batch,
                       clock_s=0.1 * batch, step_cpu_seconds=0.0, tracker=TrackerState({}, {}, {}),
                       last_evaluation=None, resumes=[])


def _save(text: str):
    return lambda path: Path(path).write_text(text)


def test_a_checkpoint_is_complete_only_with_every_ranks_own_file(tmp_path):
    folder = RunFolder.create(tmp_path / "run")
    recorder = RunRecorder(folder)
    try:
        for batch in (2, 4, 6, 8):
            own = RunFolder.rank_checkpoint(folder.periodic_checkpoint(batch), 1)
            own.write_text(f"rank 1 at {batch}")
            recorder.checkpoint(batch, _save(f"rank 0 at {batch}"), _state(batch), ranks=lambda own=own: {
                1: file_digest(own)})
    finally:
        recorder.close()
    # Pruned with their other ranks' files; rank files are never taken for rank 0's checkpoints.
    assert sorted(path.name for path in folder.checkpoints.iterdir()) == [
        "batch-0000006.ckpt", "batch-0000006.ckpt.json", "batch-0000006.rank-1.ckpt",
        "batch-0000008.ckpt", "batch-0000008.ckpt.json", "batch-0000008.rank-1.ckpt"]
    assert [path.name for path in folder.periodic_checkpoints()] == ["batch-0000006.ckpt", "batch-0000008.ckpt"]
    assert find_resume_point(folder, processes=2).batch_index == 8

    RunFolder.rank_checkpoint(folder.periodic_checkpoint(8), 1).unlink()
    point = find_resume_point(folder, processes=2)
    assert point.batch_index == 6
    assert point.skipped == ("checkpoints/batch-0000008.ckpt: rank 1's batch-0000008.rank-1.ckpt is missing",)

    # A sidecar of rank 0 alone (a run of two processes checkpointed before each rank kept its own).
    write_sidecar(folder.periodic_checkpoint(6), _state(6))
    with pytest.raises(InputError, match="its sidecar holds no checkpoint of rank 1") as refused:
        find_resume_point(folder, processes=2)
    assert str(refused.value).startswith(f"{folder.checkpoints}: no complete checkpoint to resume from")
    assert find_resume_point(folder).batch_index == 8  # one process: rank 0's file is the whole state
