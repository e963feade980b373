"""The input pipeline: parallel shard readers -> shuffle buffer -> batch and pad -> prefetch.

Deterministic for a seed: shard order is a seeded permutation per epoch, readers run in
parallel but their shards are consumed in that order, and the shuffle buffer draws from a
seeded generator. So every backend sees the same batches in the same order.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchbase.backend import Batch
from benchbase.data.store import FeatureStore, Utterance

__all__ = ["BatchPipeline", "pad_batch"]

_END = object()


class BatchPipeline:
    def __init__(
        self,
        store: FeatureStore,
        subsets: tuple[str, ...],
        batch_size: int,
        readers: int = 2,
        prefetch: int = 4,
        shuffle_buffer: int = 1024,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int = 0,
    ) -> None:
        self.store = store
        self.shards = store.shards(subsets)
        self.utterances = store.utterance_count(subsets)
        self.batch_size = batch_size
        self.readers = readers
        self.prefetch = prefetch
        self.shuffle_buffer = shuffle_buffer if shuffle else 0
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.utterances, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """The batches of one epoch, produced by a background thread ``prefetch`` batches ahead."""
        batches: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        producer = threading.Thread(
            target=self._produce, args=(epoch, batches, stop), name=f"benchbase-pipeline-{epoch}", daemon=True
        )
        producer.start()
        try:
            while (item := batches.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            _drain(batches)
            producer.join(timeout=10)

    def _produce(self, epoch: int, batches: queue.Queue, stop: threading.Event) -> None:
        try:
            rng = np.random.default_rng([self.seed, epoch])
            pending: list[Utterance] = []
            for utterance in self._shuffled(self._read_in_order(rng, stop), rng):
                pending.append(utterance)
                if len(pending) == self.batch_size:
                    _put(batches, pad_batch(pending), stop)
                    pending = []
            if pending and not self.drop_last:
                _put(batches, pad_batch(pending), stop)
            _put(batches, _END, stop)
        except BaseException as error:  # handed to the consumer, which re-raises it
            _put(batches, error, stop)

    def _read_in_order(self, rng: np.random.Generator, stop: threading.Event) -> Iterator[Utterance]:
        order = rng.permutation(len(self.shards)) if self.shuffle else np.arange(len(self.shards))
        with ThreadPoolExecutor(max_workers=self.readers, thread_name_prefix="benchbase-reader") as pool:
            in_flight: deque = deque()
            upcoming = iter(order)
            for index in upcoming:
                in_flight.append(pool.submit(self.store.read, self.shards[index]))
                if len(in_flight) >= 2 * self.readers:
                    break
            while in_flight and not stop.is_set():
                shard = in_flight.popleft().result()
                next_index = next(upcoming, None)
                if next_index is not None:
                    in_flight.append(pool.submit(self.store.read, self.shards[next_index]))
                yield from shard

    def _shuffled(self, utterances: Iterator[Utterance], rng: np.random.Generator) -> Iterator[Utterance]:
        if self.shuffle_buffer <= 1:
            yield from utterances
            return
        buffer: list[Utterance] = []
        for utterance in utterances:
            if len(buffer) < self.shuffle_buffer:
                buffer.append(utterance)
                continue
            slot = int(rng.integers(len(buffer)))
            yield buffer[slot]
            buffer[slot] = utterance
        rng.shuffle(buffer)
        yield from buffer


def pad_batch(utterances: list[Utterance]) -> Batch:
    """Right-pad features with zeros and labels with the blank (index 0)."""
    frames = np.asarray([u.features.shape[0] for u in utterances], dtype=np.int32)
    label_lengths = np.asarray([len(u.labels) for u in utterances], dtype=np.int32)
    features = np.zeros((len(utterances), frames.max(), utterances[0].features.shape[1]), dtype=np.float32)
    labels = np.zeros((len(utterances), label_lengths.max()), dtype=np.int32)
    for row, utterance in enumerate(utterances):
        features[row, : frames[row]] = utterance.features
        labels[row, : label_lengths[row]] = utterance.labels
    return Batch(
        features=features,
        feature_lengths=frames,
        labels=labels,
        label_lengths=label_lengths,
        utterance_ids=tuple(u.utterance_id for u in utterances),
        transcripts=tuple(u.transcript for u in utterances),
    )


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
