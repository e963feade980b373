"""Decoding a batch's utterances in parallel, and in the background.

The search kernels are compiled without the GIL, so plain threads decode one utterance each
on every core: no worker processes to spawn, no language model to pickle into them, and the
results come back in batch order whatever the scheduling, so decoding stays deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

__all__ = ["BackgroundDecoding", "available_cores", "decode_rows"]


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def decode_rows(decode_one: Callable[[np.ndarray], str], log_probs: np.ndarray, lengths: np.ndarray,
                workers: int) -> list[str]:
    """Apply ``decode_one`` to each row's valid frames, on up to ``workers`` threads."""
    rows = [log_probs[i, : int(length)] for i, length in enumerate(lengths)]
    if workers <= 1 or len(rows) <= 1:
        return [decode_one(row) for row in rows]
    with ThreadPoolExecutor(min(workers, len(rows)), thread_name_prefix="benchbase-decode") as pool:
        return list(pool.map(decode_one, rows))


class BackgroundDecoding:
    """Decode batches while the caller computes the next ones (e.g. the backend's predict on
    the dev set), so evaluation takes max(predict, decode) rather than their sum.

        decoding = BackgroundDecoding(decoder)
        for batch in dev: decoding.submit(backend.predict(batch.inputs()), batch.output_lengths)
        hypotheses = decoding.results()
    """

    def __init__(self, decoder) -> None:
        self.decoder = decoder
        # One batch at a time in the background: the decoder already uses every core inside it.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="benchbase-background-decode")
        self._pending: list[Future] = []

    def submit(self, log_probs: np.ndarray, lengths: np.ndarray) -> None:
        self._pending.append(self._pool.submit(self.decoder.decode, log_probs, lengths))

    def results(self) -> list[str]:
        """Every submitted batch's texts, in submission order; waits for the last."""
        try:
            return [text for future in self._pending for text in future.result()]
        finally:
            self._pending.clear()
            self._pool.shutdown()
