"""Batches read and padded in worker processes, for hosts whose reader threads the GIL would hold back.

Reading a batch (its utterances' float16 features from the memory-mapped shards, converted and
normalized) and padding it is mostly NumPy work that releases the GIL, but every utterance also
costs interpreter time that holds it; one process's threads can never deliver more batches a
second than that share allows, whatever the host's cores (docs/BENCHMARKS.md, "The input pipeline
at scale"). With a profile's ``reader_processes`` N > 0, N worker processes each read and pad
whole batches into blocks of shared memory, and the pipeline's thread copies each out (into the
backend's host array where it offers one, as a reader thread pads into it) and hands it on.

The batches are those the reader threads make, bit for bit: the pipeline cuts the same batches
of (shard, position) picks from the shards' indexes, a worker reads and pads them with the same
functions (``FeatureStore.read_utterances``, ``pad_batch``), and the results are taken in plan
order. The pool and its blocks live as long as one epoch's production (``BatchWorkers`` is a
context manager the producer thread holds): a worker ends with its parent, however the parent
ends (``process_guard``), and multiprocessing's resource tracker unlinks the blocks of a parent
that was killed. The blocks live in /dev/shm: 2N of the training batch at its longest.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

import numpy as np

from benchbase.backend import Batch
from benchbase.data.padding import pad_batch
from benchbase.data.store import FeatureStore
from benchbase.process_guard import end_with_parent
from benchbase.specs import ModelSpec

__all__ = ["BatchWorkers", "Pick"]

Pick = tuple[Path, int]
"""An utterance by its shard and its position there."""

Destination = Callable[[tuple[int, ...]], "np.ndarray | None"]
"""A batch's features' shape -> the float32 array to copy them into, or None: a new NumPy array."""

SLOTS_PER_PROCESS = 2
"""Batches in flight per worker: one padded while the other waits to be copied out."""


class BatchWorkers:
    """Worker processes that read and pad batches of picks; ``batches`` yields them in order."""

    def __init__(self, store: FeatureStore, model: ModelSpec, pad_to_frames: int | None, processes: int,
                 largest_batch: tuple[int, int, int]) -> None:
        """``largest_batch``: (rows, frames, features) of the widest batch the plan can cut."""
        self._slots: list[SharedMemory] = []
        self._pool = ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(os.getpid(), store.root, model, pad_to_frames))
        try:
            size = int(np.prod(largest_batch)) * np.dtype(np.float32).itemsize
            self._slots = [SharedMemory(create=True, size=max(size, 1)) for _ in range(SLOTS_PER_PROCESS * processes)]
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> BatchWorkers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def batches(self, groups: Iterable[list[Pick]], stop: threading.Event,
                destination: Destination | None = None) -> Iterator[Batch]:
        """Each group's batch, in order, with as many in flight as there are blocks. ``destination``
        (shape -> float32 array or None) gives the array a batch's features are copied into."""
        free: deque[SharedMemory] = deque(self._slots)
        in_flight: deque[tuple[Future, SharedMemory]] = deque()
        for picks in groups:
            if stop.is_set():
                return
            if not free:
                batch, slot = self._collect(*in_flight.popleft(), destination)
                free.append(slot)
                yield batch
            slot = free.popleft()
            in_flight.append((self._pool.submit(_pad_picks, picks, slot.name), slot))
        while in_flight and not stop.is_set():
            batch, _ = self._collect(*in_flight.popleft(), destination)
            yield batch

    @staticmethod
    def _collect(future: Future, slot: SharedMemory, destination: Destination | None) -> tuple[Batch, SharedMemory]:
        batch, shape = future.result()
        padded = np.ndarray(shape, dtype=np.float32, buffer=slot.buf)
        features = destination(shape) if destination is not None else None
        if features is None:
            features = np.empty(shape, dtype=np.float32)
        np.copyto(features, padded)  # the block is free again once this returns
        del padded  # no view may outlive the block (SharedMemory.close refuses while one does)
        return dataclasses.replace(batch, features=features), slot

    def close(self) -> None:
        """Stop the workers (queued batches are dropped) and free the shared blocks."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        for slot in self._slots:
            slot.close()
            slot.unlink()
        self._slots = []


@dataclasses.dataclass(frozen=True)
class _WorkerState:
    store: FeatureStore
    model: ModelSpec
    pad_to_frames: int | None
    attached: dict[str, SharedMemory]


_state: _WorkerState | None = None


def _start_worker(parent_pid: int, root: Path, model: ModelSpec, pad_to_frames: int | None) -> None:
    global _state
    end_with_parent(parent_pid)  # a killed run leaves no worker behind
    _state = _WorkerState(FeatureStore(root), model, pad_to_frames, {})


def _pad_picks(picks: list[Pick], slot_name: str) -> tuple[Batch, tuple[int, int, int]]:
    """Read and pad one batch into the named block; the batch without its features, and their shape."""
    assert _state is not None, "worker not initialized"
    if slot_name not in _state.attached:
        _state.attached[slot_name] = SharedMemory(name=slot_name)
    block = _state.attached[slot_name].buf

    def in_block(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.ndarray(shape, dtype=dtype, buffer=block)

    batch = pad_batch(_state.store.read_utterances(picks), _state.model, _state.pad_to_frames, in_block)
    shape = batch.features.shape
    return dataclasses.replace(batch, features=np.empty((0, 0, 0), dtype=np.float32)), shape
