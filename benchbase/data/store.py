"""The framework-neutral feature store: shards of 64 utterances as uncompressed .npz files.

Each shard holds every utterance's features concatenated along time (float16: ample for
log-mel dB values and half the disk and I/O), with offsets to cut them apart, the encoded
labels likewise, and the ids and transcripts. Normalization statistics of the training
split live beside the shards and are applied when a shard is read, so the shards never
need rewriting if the statistics change.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchbase.errors import InputError

__all__ = ["SHARD_SIZE", "FeatureStore", "Utterance", "atomic_write_bytes", "read_shard", "write_shard"]

SHARD_SIZE = 64
STORE_FILE = "store.json"
STATS_FILE = "stats.npz"


@dataclass(frozen=True)
class Utterance:
    utterance_id: str
    features: np.ndarray
    """(frames, dimension); float16 raw in a shard, float32 normalized once read."""
    labels: np.ndarray
    transcript: str


def atomic_write_bytes(path: Path, write) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, fsync, then rename into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_shard(path: Path, utterances: list[Utterance]) -> None:
    frames = [u.features.shape[0] for u in utterances]
    label_counts = [len(u.labels) for u in utterances]
    arrays = {
        "features": np.concatenate([u.features for u in utterances]).astype(np.float16),
        "frame_offsets": np.concatenate([[0], np.cumsum(frames)]).astype(np.int64),
        "labels": np.concatenate([u.labels for u in utterances]).astype(np.int32),
        "label_offsets": np.concatenate([[0], np.cumsum(label_counts)]).astype(np.int64),
        "ids": np.asarray([u.utterance_id for u in utterances]),
        "transcripts": np.asarray([u.transcript for u in utterances]),
    }
    atomic_write_bytes(path, lambda handle: np.savez(handle, **arrays))


def read_shard(path: Path, mean: np.ndarray | None = None, std: np.ndarray | None = None) -> list[Utterance]:
    """A shard's utterances, normalized with (mean, std) when given."""
    try:
        with np.load(path, allow_pickle=False) as shard:
            arrays = {name: shard[name] for name in shard.files}
    except (OSError, ValueError, KeyError) as error:
        raise InputError(f"{path}: unreadable shard: {error}") from None
    features = arrays["features"].astype(np.float32)
    if mean is not None:
        features = (features - mean) / std
    frame_offsets, label_offsets = arrays["frame_offsets"], arrays["label_offsets"]
    return [
        Utterance(
            str(arrays["ids"][i]),
            features[frame_offsets[i] : frame_offsets[i + 1]],
            arrays["labels"][label_offsets[i] : label_offsets[i + 1]],
            str(arrays["transcripts"][i]),
        )
        for i in range(len(arrays["ids"]))
    ]


class FeatureStore:
    """A prepared store: store.json (splits, shards, counts), stats.npz and the shards."""

    def __init__(self, root: Path) -> None:
        self.root = root
        description = root / STORE_FILE
        try:
            self.description = json.loads(description.read_text(encoding="utf-8"))
            with np.load(root / STATS_FILE) as stats:
                self.mean = stats["mean"].astype(np.float32)
                self.std = stats["std"].astype(np.float32)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"{root}: not a prepared feature store ({error})") from None

    @staticmethod
    def exists(root: Path) -> bool:
        return (root / STORE_FILE).is_file() and (root / STATS_FILE).is_file()

    def shards(self, subsets: tuple[str, ...] | list[str]) -> list[Path]:
        """Shard files of the named subsets, in subset order."""
        return [self.root / name for subset in subsets for name in self._split(subset)["shards"]]

    def utterance_count(self, subsets: tuple[str, ...] | list[str]) -> int:
        return sum(int(self._split(subset)["utterances"]) for subset in subsets)

    def _split(self, subset: str) -> dict:
        splits = self.description["splits"]
        if subset not in splits:
            raise InputError(f"{self.root}: no subset {subset!r} prepared; available: {', '.join(sorted(splits))}")
        return splits[subset]

    def read(self, shard: Path) -> list[Utterance]:
        return read_shard(shard, self.mean, self.std)

    @property
    def feature_dimension(self) -> int:
        return int(self.mean.shape[0])
