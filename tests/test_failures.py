"""Runs that must not measure garbage or leave anything behind: NaN features, an empty
training split, SIGTERM, and a parent killed outright."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_helpers import benchbase_in_process
from test_plugins import LinearCTCBackend, ThirdPartyPlugin, install_fake_plugin, stand_in_workload

from benchbase.compliance.checker import check_log
from benchbase.data.integrity import shard_checksums
from benchbase.data.store import FeatureStore, features_path
from benchbase.errors import InputError, NonFiniteError
from benchbase.harness import run_benchmark
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig


def _linear_run(store: Path, out: Path, **hardware_pipeline):
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(ThirdPartyPlugin())
    registry = collect_registry(manager)
    profile = registry.profile("cpu")
    if hardware_pipeline:
        profile = profile.model_copy(update={"pipeline": profile.pipeline.model_copy(update=hardware_pipeline)})
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=2)
    config = RunConfig(workload=workload, backend="linear-ctc", hardware=profile, seed=1, out=out, data=store)
    return run_benchmark(config, manager, registry.backend("linear-ctc")), registry


def _events(run: Path) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in (run / "mllog.log").read_text().splitlines()]


def test_nan_features_stop_the_run_at_the_first_batch_and_fail_check(small_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    description = json.loads((store / "store.json").read_text())
    for shard in FeatureStore(store).shards(["train"]):
        features = np.load(features_path(shard), mmap_mode="r+")
        features[:] = np.nan  # a broken extraction: every training frame is NaN
        features.flush()
        del features
        # ... recorded as prepared, so the checksums vouch for it: only the numbers are wrong.
        description["splits"]["train"]["checksums"][str(shard.relative_to(store))] = shard_checksums(shard)
    (store / "store.json").write_text(json.dumps(description))
    with pytest.raises(NonFiniteError, match=r"batch 1 \(epoch 1\): train_step returned a loss of nan on utterances"):
        _linear_run(store, tmp_path / "run")
    stop = [event for event in _events(tmp_path / "run") if event["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted"
    assert stop[0]["metadata"]["stop_reason"] == "non_finite" and "batch 1" in stop[0]["metadata"]["error"]
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    report = check_log(tmp_path / "run" / "mllog.log", workloads=registry.workloads)
    assert any(line.startswith("numeric_health: ") and "non-finite" in line for line in report.failures)


def test_a_training_split_smaller_than_one_batch_is_refused_before_the_clock(small_store, tmp_path):
    train = FeatureStore(small_store).utterance_count(["train"])
    batch = train + 1
    with pytest.raises(InputError, match=f"the training subsets hold {train} utterances, fewer than one global "
                                         f"batch of {batch}"):
        _linear_run(small_store, tmp_path / "run", global_batch=batch, batch_per_device=batch)
    assert not (tmp_path / "run").exists()  # nothing was measured, and the same --out stays usable


def _start_run(store: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchbase", "run", "--workload", "ds2-mini", "--backend", "torch",
                             "--hw", "cpu", "--data", str(store), "--out", str(out), "--max-epochs", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_training(out: Path, process: subprocess.Popen, timeout: float = 180) -> psutil.Process:
    """Wait until batches are being trained; returns the run's telemetry sampler process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-2000:]
        metrics = out / "metrics.jsonl"
        if metrics.exists() and metrics.stat().st_size > 0:
            # The sampler is the run's one spawned worker (multiprocessing's resource tracker aside).
            samplers = [child for child in psutil.Process(process.pid).children()
                        if "spawn_main" in " ".join(child.cmdline())]
            assert len(samplers) == 1, [child.cmdline() for child in psutil.Process(process.pid).children()]
            return samplers[0]
        time.sleep(0.2)
    raise AssertionError("the run never started training")


def test_sigterm_ends_the_log_stops_telemetry_and_exits_143(small_store, tmp_path):
    out = tmp_path / "run"
    process = _start_run(small_store, out)
    sampler = _wait_for_training(out, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "benchbase: error: terminated (SIGTERM)"
    stop = [event for event in _events(out) if event["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted"
    assert stop[0]["metadata"]["stop_reason"] == "interrupted"
    assert not sampler.is_running() or sampler.status() == psutil.STATUS_ZOMBIE
    # A preemption keeps what was trained: a checkpoint of the model after the last whole step.
    saved = [event for event in _events(out) if event["key"] == "benchbase_checkpoint"]
    assert saved and saved[-1]["metadata"]["terminated"] is True
    assert (out / saved[-1]["value"]).is_file()
    assert not list((out / "checkpoints").glob(".*.tmp"))


def test_ctrl_c_ends_the_log_and_says_so_in_one_line_with_130(small_store, tmp_path):
    """As Ctrl-C reaches a run in a terminal (SIGINT not ignored, whatever the test's runner does
    with it): click turns it into an abort, which the line names as the interruption it was."""
    out = tmp_path / "run"
    as_in_a_terminal = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "sys.argv = ['benchbase', *sys.argv[1:]]; runpy.run_module('benchbase', run_name='__main__')")
    process = subprocess.Popen([sys.executable, "-c", as_in_a_terminal, "run", "--workload", "ds2-mini", "--backend",
                                "torch", "--hw", "cpu", "--data", str(small_store), "--out", str(out), "--max-epochs",
                                "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_training(out, process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "benchbase: error: interrupted (Ctrl-C)"
    stop = [event for event in _events(out) if event["key"] == "run_stop"]
    assert [(event["metadata"]["status"], event["metadata"]["stop_reason"]) for event in stop] == [
        ("aborted", "interrupted")]


def test_a_killed_run_leaves_no_sampler_writing(small_store, tmp_path):
    out = tmp_path / "run"
    process = _start_run(small_store, out)
    sampler = _wait_for_training(out, process)
    os.kill(process.pid, signal.SIGKILL)  # no Python cleanup runs in the parent
    process.communicate(timeout=30)
    sampler.wait(timeout=5)  # the kernel's parent-death signal ends it within seconds
    size = (out / "telemetry.jsonl").stat().st_size
    time.sleep(1.0)
    assert (out / "telemetry.jsonl").stat().st_size == size


def test_a_killed_synthesis_leaves_no_worker_and_its_leftovers_are_removed(tmp_path):
    out = tmp_path / "corpus"
    process = subprocess.Popen([sys.executable, "-m", "benchbase", "data", "synth", "--out", str(out),
                                "--utterances", "400", "--seed", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [child for child in psutil.Process(process.pid).children()
                   if "spawn_main" in " ".join(child.cmdline())]
        time.sleep(0.2)
    assert workers, "the synthesis never started its workers"
    partial = tmp_path / f".corpus.partial-{process.pid}"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, [worker.cmdline() for worker in alive]
    assert partial.exists()  # SIGKILL runs no cleanup ...
    from benchbase.data.synth import synthesize_corpus

    synthesize_corpus(out, utterances=5, seed=3, workers=1)
    assert not partial.exists()  # ... the next synthesis into the same place removes it


def test_a_failed_checkpoint_write_leaves_no_temporary_file(tmp_path):
    from benchbase.harness.recorder import RunRecorder
    from benchbase.run_folder import RunFolder

    recorder = RunRecorder(RunFolder.create(tmp_path / "run"))

    def full_disk(path: Path) -> None:
        path.write_bytes(b"half a checkpoint")
        raise OSError(28, "No space left on device", str(path))

    with pytest.raises(OSError, match="No space left"):
        recorder.checkpoint(250, full_disk, {})
    recorder.close()
    assert list((tmp_path / "run" / "checkpoints").iterdir()) == []


def _mounted_tmpfs(where: Path, options: str):
    """A small tmpfs at ``where`` (root only); None where it cannot be mounted."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    return where if mounted.returncode == 0 else None


# Which write meets the full disk first varies (the log, metrics, a checkpoint, whose framework
# words it its own way), so for a full disk the line must name the file, not the OS's words.
@pytest.mark.parametrize("options, words", [("ro,size=64k", "Read-only file system"), ("size=48k", "")])
def test_out_on_a_read_only_or_full_filesystem_is_one_line(small_store, tmp_path, options, words):
    mount = _mounted_tmpfs(tmp_path / "mount", options)
    if mount is None:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        finished = subprocess.run([sys.executable, "-m", "benchbase", "run", "--workload", "ds2-mini", "--backend",
                                   "torch", "--hw", "cpu", "--data", str(small_store), "--out", str(mount / "run"),
                                   "--max-epochs", "1"], capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    assert finished.returncode not in (0, 130), finished.stderr[-2000:]
    assert "Traceback" not in finished.stderr
    last = finished.stderr.strip().splitlines()[-1]
    assert last.startswith("benchbase: error: ") and words in last and str(mount) in last


# --- a backend with a bug ------------------------------------------------------------------------------


class FallsOverInTrainStep(LinearCTCBackend):
    """A third party's backend whose train_step() raises, deep in its own code."""

    name = "falls-over-in-train-step"

    def train_step(self, batch):
        self._fall_over()
        return super().train_step(batch)

    def _fall_over(self):
        raise RuntimeError("the device fell over\n(the framework's second line)")


class FallsOverInPredict(FallsOverInTrainStep):
    name = "falls-over-in-predict"

    def train_step(self, batch):
        return LinearCTCBackend.train_step(self, batch)

    def predict(self, inputs):
        self._fall_over()
        return super().predict(inputs)


def _raising_line() -> str:
    """Where the backend raises, as the error names it: this file and the line of the raise."""
    lines, first = inspect.getsourcelines(FallsOverInTrainStep._fall_over)
    return f"{Path(__file__).name}:{first + next(i for i, line in enumerate(lines) if 'raise' in line)}"


def _run_backend(capsys, monkeypatch, backend, store: Path, out: Path, *before: str) -> tuple[int, str, str]:
    install_fake_plugin(monkeypatch, "falls-over", "falls_over_benchbase_plugin", "register_backends", backend)
    monkeypatch.delenv("BENCHBASE_LOAD_PLUGINS", raising=False)
    return benchbase_in_process(capsys, *before, "run", "--workload", "ds2-mini", "--backend", backend.name, "--hw",
                                "cpu", "--data", str(store), "--out", str(out), "--max-epochs", "1",
                                "--no-final-eval", "--set", "workload.evaluation.independent_utterances=0")


@pytest.mark.parametrize(("backend", "method"), [(FallsOverInTrainStep, "train_step"),
                                                 (FallsOverInPredict, "predict")])
def test_a_backend_that_raises_is_one_line_naming_it_and_its_traceback_is_in_the_run_folder(
        small_store, tmp_path, monkeypatch, capsys, backend, method):
    monkeypatch.delenv("BENCHBASE_DEBUG", raising=False)
    out = tmp_path / "run"
    code, _, stderr = _run_backend(capsys, monkeypatch, backend, small_store, out)
    assert code == 1
    [line] = stderr.strip().splitlines()
    assert line == (f"benchbase: error: backend '{backend.name}' failed in {method}(): RuntimeError: the device fell "
                    f"over (at {_raising_line()}); the traceback is in {out / 'traceback.txt'}")
    kept = (out / "traceback.txt").read_text()
    assert kept.startswith("Traceback (most recent call last):") and "_fall_over" in kept
    assert "the framework's second line" in kept
    stop = [event for event in _events(out) if event["key"] == "run_stop"]
    assert [event["metadata"]["status"] for event in stop] == ["aborted"]
    assert stop[0]["metadata"]["stop_reason"] == "error" and "the device fell over" in stop[0]["metadata"]["error"]


@pytest.mark.parametrize(("option", "environment"), [("--traceback", None), (None, "1")])
def test_traceback_or_benchbase_debug_prints_the_whole_traceback_too(small_store, tmp_path, monkeypatch, capsys,
                                                                    option, environment):
    if environment is None:
        monkeypatch.delenv("BENCHBASE_DEBUG", raising=False)
    else:
        monkeypatch.setenv("BENCHBASE_DEBUG", environment)
    code, _, stderr = _run_backend(capsys, monkeypatch, FallsOverInTrainStep, small_store, tmp_path / "run",
                                   *([option] if option else []))
    assert code == 1
    assert "Traceback (most recent call last):" in stderr and "in _fall_over" in stderr
    assert stderr.strip().splitlines()[-1].startswith(f"benchbase: error: backend '{FallsOverInTrainStep.name}' "
                                                      "failed in train_step(): RuntimeError: the device fell over")
