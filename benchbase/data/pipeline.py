"""The input pipeline: parallel readers -> shuffle -> batch and pad -> prefetch.

Two ways to shuffle. By default, shards stream through a shuffle buffer: readers load
whole shards in a seeded order and the buffer mixes utterances across them. With length
bucketing, the split's index (lengths only, no features) is sorted into buckets, batches
are cut within buckets and shuffled, and readers fetch each batch's utterances from the
memory-mapped shards. Either way the result is deterministic for a seed: readers run in
parallel but their results are consumed in plan order, so every backend sees the same
batches in the same order.

Readers are threads: the features are already extracted, so reading is I/O and array
copies, during which numpy releases the GIL. Not all of it: each utterance costs interpreter
time too, which bounds what one process's threads deliver; with ``reader_processes``, worker
processes read and pad the same batches instead (``benchbase.data.reader_processes``).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

from benchbase.backend import Batch, BatchShape
from benchbase.data.padding import HostArrays, backend_array, pad_batch
from benchbase.data.reader_processes import BatchWorkers, Pick
from benchbase.data.store import FeatureStore, ShardIndex
from benchbase.specs import ModelSpec

__all__ = ["BatchPipeline", "EpochBatches", "HostArrays", "RunEpochs", "bucket_count", "bucketed_plan", "pad_batch"]



_END = object()


class BatchPipeline:
    def __init__(
        self,
        store: FeatureStore,
        subsets: tuple[str, ...],
        batch_size: int,
        *,
        model: ModelSpec,
        readers: int = 2,
        prefetch: int = 4,
        shuffle_buffer: int = 1024,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int = 0,
        length_buckets: int = 0,
        pad_to_frames: int | None = None,
        reader_processes: int = 0,
    ) -> None:
        """``reader_processes``: 0, reader threads read the batches and this process pads them; N > 0,
        N worker processes read and pad them (the same batches, bit for bit)."""
        self.store = store
        self._subsets = tuple(subsets)
        self.shards = store.shards(subsets)
        self.utterances = store.utterance_count(subsets)
        self.batch_size = batch_size
        self.readers = readers
        self.prefetch = prefetch
        self.shuffle_buffer = shuffle_buffer if shuffle else 0
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.length_buckets = length_buckets if shuffle else 0
        self.pad_to_frames = pad_to_frames
        self.reader_processes = reader_processes
        self.model = model
        self.host_arrays: HostArrays | None = None
        """Where padded features go (the backend's ``host_array``, set after its build); None: np.zeros."""

    def __len__(self) -> int:
        """Batches per epoch (with bucketing, each bucket drops its own remainder)."""
        groups = [self.utterances]
        if self.length_buckets:
            buckets = bucket_count(self.utterances, self.length_buckets, self.batch_size)
            groups = [len(part) for part in np.array_split(np.arange(self.utterances), buckets)]
        return sum(count // self.batch_size + (1 if count % self.batch_size and not self.drop_last else 0)
                   for count in groups)

    def epoch(self, epoch: int, skip: int = 0) -> EpochBatches:
        """The batches of one epoch. Production starts now, in a background thread that keeps
        ``prefetch`` batches ready, so a caller can start the next epoch before it needs it.

        ``skip``: leave out the epoch's first batches (a resumed run has trained them). The order
        depends on the seed and the epoch only, so the rest are the batches an uninterrupted
        run trains; the skipped ones are still read (the shuffle needs them) but not padded."""
        return EpochBatches(partial(self._produce, skip=skip), epoch, self.prefetch)

    def _produce(self, epoch: int, batches: queue.Queue, stop: threading.Event, skip: int = 0) -> None:
        try:
            rng = np.random.default_rng([self.seed, epoch])
            if self.reader_processes:
                self._produce_in_processes(rng, batches, stop, skip)
            else:
                groups = self._bucketed_batches(rng, stop) if self.length_buckets else self._streamed_batches(rng, stop)
                for index, group in enumerate(groups):
                    if index >= skip:
                        _put(batches, pad_batch(group, self.model, self.pad_to_frames, self.host_arrays), stop)
            _put(batches, _END, stop)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which re-raises it
            _put(batches, error, stop)

    def _produce_in_processes(self, rng: np.random.Generator, batches: queue.Queue, stop: threading.Event,
                              skip: int) -> None:
        """The same batches cut as picks from the indexes, read and padded by worker processes.
        Skipped batches are not read at all: their picks alone keep the shuffle's draws in step."""
        picks = (self._bucketed_batches(rng, stop, _as_list) if self.length_buckets
                 else self._streamed_batches(rng, stop, self._shard_picks))
        wanted = (group for index, group in enumerate(picks) if index >= skip)
        largest = (self.batch_size, self.pad_to_frames or self.store.longest(self._subsets)[0],
                   self.store.feature_dimension)
        with BatchWorkers(self.store, self.model, self.pad_to_frames, self.reader_processes, largest) as workers:
            for batch in workers.batches(wanted, stop, lambda shape: backend_array(self.host_arrays, shape)):
                _put(batches, batch, stop)

    def batch_shapes(self, epoch: int) -> list[BatchShape]:
        """The shape of every batch ``epoch(epoch)`` yields, in order, from the shards' indexes
        (lengths only: no features, no transcripts read). The batches are cut by the same code,
        on (frames, label length) pairs instead of utterances."""
        rng = np.random.default_rng([self.seed, epoch])
        stop = threading.Event()
        groups = (self._bucketed_batches(rng, stop, self._lengths_at) if self.length_buckets
                  else self._streamed_batches(rng, stop, self._shard_lengths))
        return [BatchShape(rows=len(group), frames=self.pad_to_frames or max(frames for frames, _ in group),
                           label_length=max(labels for _, labels in group)) for group in groups]

    def _shard_lengths(self, shard: Path) -> list[tuple[int, int]]:
        index = self.store.index(shard)
        return list(zip(index.frames().tolist(), np.diff(index.label_offsets).tolist()))

    def _shard_picks(self, shard: Path) -> list[Pick]:
        return [(shard, i) for i in range(len(self.store.index(shard)))]

    def _lengths_at(self, picks: list[tuple[Path, int]]) -> list[tuple[int, int]]:
        def lengths(index: ShardIndex, i: int) -> tuple[int, int]:
            return (int(index.frame_offsets[i + 1] - index.frame_offsets[i]),
                    int(index.label_offsets[i + 1] - index.label_offsets[i]))
        return [lengths(self.store.index(shard), i) for shard, i in picks]

    def _streamed_batches(self, rng: np.random.Generator, stop: threading.Event,
                          read: Callable[[Path], list] | None = None) -> Iterator[list]:
        pending: list = []
        order = rng.permutation(len(self.shards)) if self.shuffle else np.arange(len(self.shards))
        shards = _ordered_map(read or self.store.read, [self.shards[i] for i in order], self.readers, stop)
        for utterance in self._shuffled((u for shard in shards for u in shard), rng):
            pending.append(utterance)
            if len(pending) == self.batch_size:
                yield pending
                pending = []
        if pending and not self.drop_last:
            yield pending

    def _bucketed_batches(self, rng: np.random.Generator, stop: threading.Event,
                          read: Callable[[list[tuple[Path, int]]], list] | None = None) -> Iterator[list]:
        plan = bucketed_plan(self._lengths(), self.length_buckets, self.batch_size, self.drop_last, rng)
        picks = [[self._positions[i] for i in batch] for batch in plan]
        yield from _ordered_map(read or self.store.read_utterances, picks, self.readers, stop)

    def _lengths(self) -> np.ndarray:
        """Frames of every utterance of the split, in (shard, position) order; read once."""
        if not hasattr(self, "_frames"):
            indexes = [(shard, self.store.index(shard)) for shard in self.shards]
            self._positions = [(shard, i) for shard, index in indexes for i in range(len(index))]
            self._frames = np.concatenate([index.frames() for _, index in indexes])
        return self._frames

    def _shuffled(self, utterances: Iterator, rng: np.random.Generator) -> Iterator:
        if self.shuffle_buffer <= 1:
            yield from utterances
            return
        buffer: list = []
        for utterance in utterances:
            if len(buffer) < self.shuffle_buffer:
                buffer.append(utterance)
                continue
            slot = int(rng.integers(len(buffer)))
            yield buffer[slot]
            buffer[slot] = utterance
        rng.shuffle(buffer)
        yield from buffer


class EpochBatches:
    """An iterator over one epoch's batches whose producer thread starts at creation."""

    def __init__(self, produce, epoch: int, prefetch: int) -> None:
        self._batches: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._producer = threading.Thread(target=produce, args=(epoch, self._batches, self._stop),
                                          name=f"benchbase-pipeline-{epoch}", daemon=True)
        self._producer.start()
        self._finished = False

    def __iter__(self) -> EpochBatches:
        return self

    def __next__(self) -> Batch:
        if self._finished:
            raise StopIteration
        item = self._batches.get()
        if item is _END or isinstance(item, BaseException):
            self.close()
            if item is _END:
                raise StopIteration
            raise item
        return item

    def close(self) -> None:
        """Stop the producer (also midway through the epoch) and free what it holds."""
        self._finished = True
        self._stop.set()
        _drain(self._batches)
        self._producer.join(timeout=10)


class RunEpochs:
    """A run's training epochs, each one's production started when asked and at the latest when taken.

    The training loop starts the next epoch while the current one's last step trains, so that its
    readers have filled its shuffle buffer by the time its first batch is wanted: started only when
    taken, an epoch's first batch waited for its readers to start (45-65 ms a later epoch on an H200's
    host, 63-68 ms on 2 CPU cores), which in a run without evaluations between epochs is on the clock.
    The order of the batches depends on the seed and the epoch only, never on when production starts.
    """

    def __init__(self, pipeline: BatchPipeline, last_epoch: int) -> None:
        self._pipeline = pipeline
        self._last_epoch = last_epoch
        self._started: dict[int, EpochBatches] = {}

    def start(self, epoch: int, skip: int = 0) -> None:
        """Start producing ``epoch`` (``skip``: its first batches trained already, BatchPipeline.epoch);
        nothing if it is past the last epoch or already started."""
        if epoch <= self._last_epoch and epoch not in self._started:
            self._started[epoch] = self._pipeline.epoch(epoch, skip=skip)

    def take(self, epoch: int, skip: int = 0) -> EpochBatches:
        """``epoch``'s batches, started now if they were not; the caller closes them."""
        self.start(epoch, skip)
        return self._started.pop(epoch)

    def close(self) -> None:
        """Stop every epoch started and not taken (the run stopped before it)."""
        while self._started:
            self._started.popitem()[1].close()


def bucketed_plan(frames: np.ndarray, buckets: int, batch_size: int, drop_last: bool,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of utterance numbers: sort by length, split into buckets, shuffle within each
    bucket, cut batches within buckets, then shuffle the batches."""
    by_length = np.argsort(frames, kind="stable")
    batches = []
    for bucket in np.array_split(by_length, bucket_count(len(by_length), buckets, batch_size)):
        bucket = rng.permutation(bucket)
        cut = len(bucket) - len(bucket) % batch_size if drop_last else len(bucket)
        batches += [bucket[start : start + batch_size] for start in range(0, cut, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def bucket_count(utterances: int, buckets: int, batch_size: int) -> int:
    """The buckets a split of ``utterances`` is sorted into: ``buckets``, or fewer where a bucket
    would hold less than one batch, and train nothing, since each bucket drops its own remainder
    (six buckets of a 184-utterance split at batch 32 would leave no batch at all); at least one."""
    return max(1, min(buckets, utterances // batch_size))


def _as_list(picks: list[Pick]) -> list[Pick]:
    return list(picks)


def _ordered_map(function, items: list, workers: int, stop: threading.Event) -> Iterator:
    """function(item) for each item on a thread pool, at most 2 x workers ahead, yielded in order."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="benchbase-reader") as pool:
        in_flight: deque = deque()
        upcoming = iter(items)
        for item in upcoming:
            in_flight.append(pool.submit(function, item))
            if len(in_flight) >= 2 * workers:
                break
        while in_flight and not stop.is_set():
            result = in_flight.popleft().result()
            following = next(upcoming, _END)
            if following is not _END:
                in_flight.append(pool.submit(function, following))
            yield result


def _put(batches: queue.Queue, item, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            batches.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _drain(batches: queue.Queue) -> None:
    while True:
        try:
            batches.get_nowait()
        except queue.Empty:
            return
