"""A full disk (ENOSPC), simulated in process: one line naming the file, a non-zero exit, the last
complete checkpoint intact and resumable; and the free-space check before the clock."""

from __future__ import annotations

import errno
import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from cli_helpers import benchbase_in_process

from benchbase.atomic import atomic_write_bytes
from benchbase.cli.app import _describe_os_error
from benchbase.harness import disk_space, recorder
from benchbase.run_folder import write_json_line

Usage = namedtuple("Usage", "total used free")
FULL = Usage(10 * 2**30, 10 * 2**30, 0)


def _enospc(*_) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_atomic_write_keeps_the_previous_file_and_names_the_file(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("complete")

    def half_then_full(handle) -> None:
        handle.write(b"half")
        _enospc()

    with pytest.raises(OSError) as raised:
        atomic_write_bytes(path, half_then_full)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert path.read_text() == "complete" and sorted(tmp_path.iterdir()) == [path]  # no temporary file left


def test_an_appended_line_names_its_file(tmp_path):
    class Full:
        name = str(tmp_path / "metrics.jsonl")

        def write(self, text: str) -> None:
            _enospc()

    with pytest.raises(OSError) as raised:
        write_json_line(Full(), {"kind": "batch"})
    assert raised.value.filename == str(tmp_path / "metrics.jsonl")


@pytest.mark.parametrize("cause", ["chained", "free_space"])
def test_a_frameworks_failed_checkpoint_write_reads_as_a_full_disk(tmp_path, monkeypatch, cause):
    final = tmp_path / "batch-0000004.ckpt"
    final.write_bytes(b"previous")

    def torn(path: Path) -> None:
        path.write_bytes(b"torn")
        if cause == "chained":
            try:
                _enospc()
            except OSError as error:
                raise RuntimeError("[enforce fail] unexpected pos 2098368 vs 2098260") from error
        raise RuntimeError("[enforce fail] unexpected pos 2098368 vs 2098260")

    if cause == "free_space":
        monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: FULL)
    with pytest.raises(OSError) as raised:
        recorder.save_atomically(torn, final)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(final)
    assert final.read_bytes() == b"previous" and sorted(tmp_path.iterdir()) == [final]
    assert _describe_os_error(raised.value) == f"{final}: could not be written: {disk_space.DISK_FULL}"


def test_another_frameworks_error_is_not_called_a_full_disk(tmp_path):
    def broken(path: Path) -> None:
        raise RuntimeError("a bug")

    with pytest.raises(Exception) as raised:
        recorder.save_atomically(broken, tmp_path / "final.ckpt")
    assert not isinstance(raised.value, OSError) and "a bug" in str(raised.value)


def test_the_estimate_counts_checkpoints_and_optimizer_state():
    workload = _workload()
    parameters = workload.model.parameter_count(workload.features.dimension)
    assert disk_space.estimated_run_bytes(workload) > parameters * 4 * 3 * 4  # 4 checkpoints of 3 values each


def test_the_estimate_is_the_checkpoint_policy_and_logs_for_the_time_limit(monkeypatch):
    """No fixed allowance: a short run of a small model asks for little more than its checkpoints."""
    workload = _workload()
    parameters = workload.model.parameter_count(workload.features.dimension)
    checkpoints = parameters * 4 * 3 * (disk_space.PERIODIC_CHECKPOINTS_KEPT + 2) + parameters * 4
    minute = workload.model_copy(update={"max_minutes": 1.0})
    assert checkpoints < disk_space.estimated_run_bytes(minute) < checkpoints + 3 * 2**20
    hour = workload.model_copy(update={"max_minutes": 60.0})
    logs_per_minute = disk_space.estimated_log_bytes(hour) - disk_space.estimated_log_bytes(minute)
    assert disk_space.estimated_run_bytes(hour) - disk_space.estimated_run_bytes(minute) == logs_per_minute > 0
    assert disk_space.estimated_run_bytes(hour, gpus=8) > disk_space.estimated_run_bytes(hour)  # their telemetry
    unlimited = workload.model_copy(update={"max_minutes": 100_000.0})  # a placeholder, not a day-long run
    assert disk_space.estimated_log_bytes(unlimited) == disk_space.estimated_log_bytes(
        workload.model_copy(update={"max_minutes": disk_space.LOG_HORIZON_MINUTES}))
    monkeypatch.setattr(disk_space, "PERIODIC_CHECKPOINTS_KEPT", disk_space.PERIODIC_CHECKPOINTS_KEPT + 1)
    assert disk_space.estimated_run_bytes(minute) == checkpoints + parameters * 4 * 3 + (
        disk_space.estimated_log_bytes(minute))


DRY = ("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu")


def test_dry_run_and_run_refuse_alike_when_the_disk_is_too_small(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**30, 2**30 - 2**20, 2**20))
    out = tmp_path / "run"
    code, said, dry_err = benchbase_in_process(capsys, *DRY, "--out", str(out), "--dry-run")
    assert code == 2 and said == "" and len(dry_err.strip().splitlines()) == 1
    code, _, err = benchbase_in_process(capsys, *DRY, "--out", str(out), "--cache", str(tmp_path / "cache"))
    assert code == 2 and err == dry_err
    assert "1.0 MiB free (BENCHBASE_DISK_ESTIMATE=SIZE replaces the estimate)" in err
    assert "the run needs about" in err and err.rstrip().endswith("free some space or choose another --out")
    assert not out.exists()


@pytest.mark.parametrize(("value", "code", "shown"), [
    ("0", 0, "the run needs about 0 B (BENCHBASE_DISK_ESTIMATE); 1.0 MiB free on its filesystem"),
    ("512K", 0, "the run needs about 512.0 KiB (BENCHBASE_DISK_ESTIMATE)"),
    ("2G", 2, "the run needs about 2.0 GiB (BENCHBASE_DISK_ESTIMATE) and its filesystem has 1.0 MiB free"),
    ("lots", 2, "BENCHBASE_DISK_ESTIMATE='lots': expected a size such as 500M or 2G"),
])
def test_the_estimate_can_be_replaced_where_the_user_knows_better(capsys, tmp_path, monkeypatch, value, code, shown):
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**30, 2**30 - 2**20, 2**20))
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("BENCHBASE_DISK_ESTIMATE", value)
    exit_code, said, err = benchbase_in_process(capsys, *DRY, "--out", str(tmp_path / "run"), "--dry-run")
    assert exit_code == code and shown in (said if code == 0 else err), (said, err)


def test_dry_run_shows_the_estimate_when_there_is_room(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**40, 0, 2**40))
    monkeypatch.setenv("COLUMNS", "400")
    code, said, _ = benchbase_in_process(capsys, *DRY, "--out", str(tmp_path / "run"), "--dry-run")
    estimate = disk_space._size(disk_space.estimated_run_bytes(_workload()))
    assert code == 0 and f"the run needs about {estimate} (checkpoints, log and metrics); 1024.0 GiB free" in said
    assert "warning" not in said


def _workload(name: str = "ds2-mini"):
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    return collect_registry(get_plugin_manager(load_entrypoints=False)).workload(name)


def _started_run(folder: Path, checkpoint_bytes: int = 0) -> Path:
    """A run folder as a run that started and was killed leaves it: its config.json, a log, and
    (``checkpoint_bytes``) a checkpoint; nothing this test needs trains."""
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry
    from benchbase.specs import RunConfig

    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    config = RunConfig(workload=registry.workload("ds2-mini"), backend="torch", hardware=registry.profile("cpu"),
                       out=folder, data=folder.parent / "store")
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.json").write_text(config.model_dump_json())
    (folder / "mllog.log").write_text("x" * 1000)
    if checkpoint_bytes:
        (folder / "checkpoints" / "batch-0000004.ckpt").write_bytes(b"w" * checkpoint_bytes)
    return folder


def test_a_resume_needs_the_rest_of_the_run_and_a_copy_of_the_segment(tmp_path):
    from benchbase.run_folder import RunFolder

    workload = _workload()
    fresh = disk_space.estimated_run_bytes(workload)
    folder = RunFolder(_started_run(tmp_path / "run", checkpoint_bytes=2**20))
    assert disk_space.estimated_resume_bytes(workload, folder) == fresh - 2**20 + 1000


def test_resume_refuses_when_the_disk_is_too_small(capsys, tmp_path, monkeypatch):
    out = _started_run(tmp_path / "run")
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**30, 2**30 - 2**20, 2**20))
    code, _, err = benchbase_in_process(capsys, "run", "--resume", str(out))
    [line] = err.strip().splitlines()
    assert code == 1 and line.startswith(f"benchbase: error: {out}: resuming the run needs about ")
    assert line.endswith("and its filesystem has 1.0 MiB free (BENCHBASE_DISK_ESTIMATE=SIZE replaces the "
                         "estimate); free some space, then resume it again")
    assert not (out / "segments").exists()
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**40, 0, 2**40))
    code, _, err = benchbase_in_process(capsys, "run", "--resume", str(out))  # room: on to the checkpoints
    assert code == 2 and "no complete checkpoint to resume from" in err


SWEEP = {"name": "small", "workload": "ds2-mini", "backends": ["torch"], "profiles": ["cpu"], "seeds": [0, 1],
         "max_epochs": 1}


def test_sweep_sums_its_runs_estimates_warns_in_a_dry_run_and_refuses(capsys, tmp_path, monkeypatch):
    import yaml

    sweep_file = tmp_path / "small.yaml"
    sweep_file.write_text(yaml.safe_dump(SWEEP))
    out = tmp_path / "sweep"
    monkeypatch.setenv("COLUMNS", "400")
    summed = disk_space._size(2 * disk_space.estimated_run_bytes(_workload()))
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**40, 0, 2**40))
    code, said, err = benchbase_in_process(capsys, "sweep", str(sweep_file), "--out", str(out), "--dry-run")
    assert code == 0, err
    assert f"disk space: the sweep (2 runs still to run) needs about {summed} (checkpoints, log and metrics)" in said
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(2**30, 2**30 - 2**20, 2**20))
    code, said, err = benchbase_in_process(capsys, "sweep", str(sweep_file), "--out", str(out), "--dry-run")
    assert code == 0, err
    assert (f"disk space: warning: {out}: the sweep (2 runs still to run) needs about {summed} (checkpoints, log "
            "and metrics) and its filesystem has 1.0 MiB free (BENCHBASE_DISK_ESTIMATE=SIZE replaces the "
            "estimate); the sweep would refuse to start") in said
    code, said, err = benchbase_in_process(capsys, "sweep", str(sweep_file), "--out", str(out))
    assert code == 2 and err == (f"benchbase: error: {out}: the sweep (2 runs still to run) needs about {summed} "
                                 "(checkpoints, log and metrics) and its filesystem has 1.0 MiB free "
                                 "(BENCHBASE_DISK_ESTIMATE=SIZE replaces the estimate); free some space or choose "
                                 "another --out\n")
    assert not out.exists() and said == ""


@pytest.mark.slow
@pytest.mark.parametrize("failing", ["periodic", "final"])
def test_a_full_disk_ends_the_run_in_one_line_and_it_resumes(capsys, tmp_path, monkeypatch, small_store, failing):
    """The second periodic checkpoint (or the final one) meets a full disk as torch reports it."""
    real_save, real_usage = recorder.save_atomically, shutil.disk_usage  # disk_space.shutil is shutil
    periodic_calls = []

    def failing_save(save, final: Path) -> None:
        fails = final.name == "final.ckpt" if failing == "final" else (
            final.name != "final.ckpt" and len(periodic_calls) == 1)
        if final.name != "final.ckpt":
            periodic_calls.append(final)
        if not fails:
            return real_save(save, final)

        def torn(path: Path) -> None:
            path.write_bytes(b"torn")
            monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: FULL)
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 2098368 vs 2098260")

        try:
            return real_save(torn, final)
        finally:
            monkeypatch.setattr(disk_space.shutil, "disk_usage", real_usage)  # the disk has room again

    monkeypatch.setattr(recorder, "save_atomically", failing_save)
    out = tmp_path / "run"
    code, _, err = benchbase_in_process(capsys, "run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu",
                                        "--data", str(small_store), "--out", str(out), "--seed", "1",
                                        "--max-epochs", "1", "--checkpoint-every", "2", "--no-final-eval")
    assert code == 1, err[-3000:]
    [line] = err.strip().splitlines()
    failed = "final.ckpt" if failing == "final" else periodic_calls[1].name
    assert line.startswith(f"benchbase: error: {out / 'checkpoints' / failed}: could not be written: "
                           f"{disk_space.DISK_FULL}")
    kept = sorted(path.name for path in (out / "checkpoints").iterdir())
    assert not any(name.endswith(".tmp") for name in kept) and failed not in kept
    previous = periodic_calls[-1] if failing == "final" else periodic_calls[0]
    assert previous.name in kept and previous.name + ".json" in kept
    log = [json.loads(line.partition(" ")[2]) for line in (out / "mllog.log").read_text().splitlines()]
    [stop] = [event for event in log if event["key"] == "run_stop"]
    if failing == "periodic":  # the log is closed: run_stop aborted, the error named
        assert stop["metadata"]["status"] == "aborted" and stop["metadata"]["stop_reason"] == "error"
        assert disk_space.DISK_FULL in stop["metadata"]["error"] and failed in stop["metadata"]["error"]
    monkeypatch.setattr(recorder, "save_atomically", real_save)
    code, said, err = benchbase_in_process(capsys, "run", "--resume", str(out))
    assert code in (0, 3), err[-3000:]
    [resume] = json.loads((out / "result.json").read_text())["resumes"]
    assert resume["checkpoint"] == f"checkpoints/{previous.name}"


def test_a_log_line_that_cannot_be_written_raises_naming_the_log(tmp_path, capsys):
    from benchbase.compliance import ComplianceLog

    class Full:
        def write(self, text: str) -> None:
            _enospc()

        def flush(self) -> None:
            _enospc()

        def close(self) -> None:
            pass

    log = ComplianceLog(tmp_path / "mllog.log")
    log.event("cache_clear", value=True)
    log._handler.stream.close()
    log._handler.stream = Full()
    with pytest.raises(OSError) as raised:
        log.event("init_start")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "mllog.log")
    assert "Logging error" not in capsys.readouterr().err
    log._handler.stream = None
    log.close()


@pytest.mark.slow
@pytest.mark.parametrize("failing", ["final.ckpt", "result.json"])
def test_a_failed_write_after_run_stop_says_the_run_is_unfinished(capsys, tmp_path, monkeypatch, small_store, failing):
    """run_stop logged success, then the final checkpoint (or result.json) meets a full disk: the
    log keeps its verdict, the line says the result was not delivered and how to go on, `benchbase
    check` calls the folder unfinished, and the last periodic checkpoint is whole and resumable."""
    from benchbase import run_folder
    from benchbase.harness.resume import find_resume_point

    def half_then_full(handle) -> None:
        handle.write(b"half")
        _enospc()

    real_save, real_write = recorder.save_atomically, run_folder.atomic_write_text

    def full_at_final(save, final: Path) -> None:
        if final.name != failing:
            return real_save(save, final)

        def half(path: Path) -> None:
            path.write_bytes(b"half")
            _enospc()
        return real_save(half, final)

    def full_at_result(path: Path, text: str) -> None:
        if path.name != failing:
            return real_write(path, text)
        return atomic_write_bytes(path, half_then_full)

    monkeypatch.setattr(recorder, "save_atomically", full_at_final)
    monkeypatch.setattr(run_folder, "atomic_write_text", full_at_result)
    out = tmp_path / "run"
    code, _, err = benchbase_in_process(capsys, *DRY, "--data", str(small_store), "--out", str(out),
                                        "--seed", "1", "--max-epochs", "1", "--checkpoint-every", "2",
                                        "--target", "cer=100", "--set", "workload.tta.window=1", "--no-final-eval")
    assert code == 1, err[-3000:]
    folder = run_folder.RunFolder(out)
    point = find_resume_point(folder)  # the last periodic checkpoint: whole, its checksum matching
    failed = out / "checkpoints" / failing if failing == "final.ckpt" else out / failing
    [line] = err.strip().splitlines()
    assert line == (f"benchbase: error: {failed}: could not be written: {disk_space.DISK_FULL}; run_stop logged "
                    "status success, but the run is unfinished without result.json: free some space, then "
                    f"`benchbase run --resume {out}` trains again from {folder.relative(point.checkpoint)}")
    assert not failed.exists() and not any(path.name.endswith(".tmp") for path in out.rglob("*"))
    log = [json.loads(line.partition(" ")[2]) for line in (out / "mllog.log").read_text().splitlines()]
    [stop] = [event for event in log if event["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "success"  # the verdict of the timed phase (docs/design.md)
    monkeypatch.undo()
    code, said, _ = benchbase_in_process(capsys, "check", str(out))
    assert code == 4 and "UNFINISHED" in said and "no result.json" in " ".join(said.split())
