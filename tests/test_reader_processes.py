"""Reader processes (a profile's ``reader_processes``) deliver the batches reader threads do, bit for
bit, masked alike by SpecAugment, and leave no process or shared memory behind however the epoch ends."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from benchbase.data.augmentation import training_batch
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.errors import InputError
from benchbase.process_guard import child_python_environment
from benchbase.specs import HardwareProfile, SpecAugmentSpec

FIELDS = (
    "features", "feature_lengths", "output_lengths", "labels", "label_lengths", "utterance_ids", "transcripts")


def _pipeline(store: Path, workload, processes: int, **settings) -> BatchPipeline:
    return BatchPipeline(FeatureStore(store), ("train",), 16, model=workload.model, readers=2, seed=5,
                         shuffle_buffer=64, reader_processes=processes, **settings)


def _assert_same_batches(threads: list, processes: list) -> None:
    assert len(threads) == len(processes) > 2
    for a, b in zip(threads, processes, strict=True):
        for name in FIELDS:
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and np.array_equal(x, y), name
            else:
                assert x == y, name
        assert b.features.flags.c_contiguous and b.features.flags.writeable


def _workers() -> list[psutil.Process]:
    """This process's spawned workers (not multiprocessing's resource tracker, which stays)."""
    workers = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                workers.append(child)
        except psutil.NoSuchProcess:
            pass
    return workers


@pytest.mark.parametrize("settings", [{}, {"length_buckets": 3}, {"pad_to_frames": 1700}],
                         ids=["shuffle buffer", "length buckets", "padded to frames"])
def test_processes_deliver_the_threads_batches_bit_for_bit(small_store, mini_workload, settings):
    threads = list(_pipeline(small_store, mini_workload, 0, **settings).epoch(2, skip=1))
    processes = list(_pipeline(small_store, mini_workload, 2, **settings).epoch(2, skip=1))
    _assert_same_batches(threads, processes)
    spec = SpecAugmentSpec()
    for index, (a, b) in enumerate(zip(threads, processes, strict=True), start=2):  # the masks too
        masked = (training_batch(batch, spec, 5, 2, index).features for batch in (a, b))
        assert np.array_equal(*masked)
    assert not _workers()


def test_processes_copy_into_the_backends_host_arrays(small_store, mini_workload):
    handed: list[np.ndarray] = []

    def host_array(shape, dtype):
        handed.append(np.full(shape, np.nan, dtype=dtype))  # whatever it held is overwritten
        return handed[-1]

    pipeline = _pipeline(small_store, mini_workload, 1)
    pipeline.host_arrays = host_array
    batches = list(pipeline.epoch(1))
    assert len(batches) == len(handed)
    assert all(batch.features is array for batch, array in zip(batches, handed, strict=True))
    _assert_same_batches(list(_pipeline(small_store, mini_workload, 0).epoch(1)), batches)


def _shared_blocks() -> set[str]:
    """multiprocessing's shared memory blocks (its psm_ names) on this machine."""
    shm = Path("/dev/shm")
    return {path.name for path in shm.glob("psm_*")} if shm.is_dir() else set()


def test_closing_an_epoch_midway_ends_its_workers_and_frees_its_shared_memory(small_store, mini_workload):
    before = _shared_blocks()
    epoch = _pipeline(small_store, mini_workload, 2).epoch(1)
    next(epoch)
    assert len(_workers()) >= 2
    assert _shared_blocks() - before  # the blocks the batches are padded in
    epoch.close()
    assert not _workers()
    assert not _shared_blocks() - before


def test_a_workers_error_reaches_the_consumer(small_store, mini_workload, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(small_store, store, ignore=shutil.ignore_patterns("*.features.npy"))  # the indexes only
    for shard in store.glob("*.npz"):
        shard.with_suffix(".features.npy").write_bytes(b"not an array")
    with pytest.raises(InputError, match="unreadable shard features"):
        list(_pipeline(store, mini_workload, 1).epoch(1))
    assert not _workers()


def test_reader_processes_is_a_profile_setting_off_by_default(registry):
    profile = registry.profile("cpu")
    assert profile.pipeline.reader_processes == 0
    data = profile.model_dump(mode="json")
    data["pipeline"]["reader_processes"] = 4
    assert HardwareProfile.model_validate(data).pipeline.reader_processes == 4
    data["pipeline"]["reader_processes"] = -1
    with pytest.raises(ValueError, match="reader_processes"):
        HardwareProfile.model_validate(data)


KILLED_RUN = """
import sys, time
from pathlib import Path
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

if __name__ == "__main__":
    model = collect_registry(get_plugin_manager(load_entrypoints=False)).workload("ds2-mini").model
    epoch = BatchPipeline(FeatureStore(Path(sys.argv[1])), ("train",), 16, model=model, reader_processes=2).epoch(1)
    next(epoch)
    print("training", flush=True)
    time.sleep(120)
"""


def test_a_killed_run_leaves_no_worker_and_no_shared_memory(small_store):
    before = _shared_blocks()
    run = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(small_store)], stdout=subprocess.PIPE,
                           env=child_python_environment())
    try:
        assert run.stdout.readline() == b"training\n"
        children = psutil.Process(run.pid).children(recursive=True)  # the workers, the resource tracker
        assert len(children) >= 3 and _shared_blocks() - before
    finally:
        run.kill()  # SIGKILL: no cleanup of its own runs
        run.wait()
    gone, alive = psutil.wait_procs(children, timeout=20)
    assert not alive
    deadline = time.monotonic() + 20
    while _shared_blocks() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _shared_blocks() - before
