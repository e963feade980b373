"""The framework-neutral feature store: shards of up to 64 utterances.

A shard is two files: NAME.features.npy, every utterance's features concatenated along time
(float16: ample for log-mel dB values, half the disk and I/O), memory-mapped when read so
that a store larger than RAM is never loaded whole; and NAME.npz, the index: frame and label
offsets, the encoded labels, ids and transcripts. Normalization statistics of the training
split live beside the shards and are applied when an utterance is taken from a shard, so
the shards never need rewriting if the statistics change.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchbase.atomic import atomic_write_bytes
from benchbase.errors import InputError

__all__ = [
    "SHARD_SIZE",
    "FeatureStore",
    "Utterance",
    "FORMAT_VERSION",
    "ShardIndex",
    "features_path",
    "read_index",
    "read_shard",
    "write_shard",
]

SHARD_SIZE = 64
STORE_FILE = "store.json"
STATS_FILE = "stats.npz"
OPEN_MAPS = 128
FORMAT_VERSION = 3
"""Bumped whenever the shard layout changes; a store of another version is prepared again.
3: store.json and each shard's sidecar hold the shards' SHA-256 checksums."""


@dataclass(frozen=True)
class Utterance:
    utterance_id: str
    features: np.ndarray
    """(frames, dimension); float16 raw in a shard, float32 normalized once read."""
    labels: np.ndarray
    transcript: str


def write_shard(path: Path, utterances: list[Utterance]) -> None:
    """Write the shard at ``path`` (NAME.npz) and its features (NAME.features.npy), each atomically."""
    frames = [u.features.shape[0] for u in utterances]
    label_counts = [len(u.labels) for u in utterances]
    features = np.concatenate([u.features for u in utterances]).astype(np.float16)
    index = {
        "frame_offsets": np.concatenate([[0], np.cumsum(frames)]).astype(np.int64),
        "labels": np.concatenate([u.labels for u in utterances]).astype(np.int32),
        "label_offsets": np.concatenate([[0], np.cumsum(label_counts)]).astype(np.int64),
        "ids": np.asarray([u.utterance_id for u in utterances]),
        "transcripts": np.asarray([u.transcript for u in utterances]),
    }
    atomic_write_bytes(features_path(path), lambda handle: np.save(handle, features))
    atomic_write_bytes(path, lambda handle: np.savez(handle, **index))


def features_path(shard: Path) -> Path:
    return shard.with_suffix(".features.npy")


@dataclass(frozen=True)
class ShardIndex:
    """Everything in a shard but its features: small enough to keep in memory for a whole store."""

    frame_offsets: np.ndarray
    labels: np.ndarray
    label_offsets: np.ndarray
    ids: np.ndarray
    transcripts: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def frames(self) -> np.ndarray:
        return np.diff(self.frame_offsets)


def read_index(path: Path) -> ShardIndex:
    try:
        with np.load(path, allow_pickle=False) as shard:
            return ShardIndex(**{name: shard[name] for name in ShardIndex.__dataclass_fields__})
    except (OSError, ValueError, KeyError) as error:
        raise InputError(f"{path}: unreadable shard index: {error}") from None


def map_features(path: Path) -> np.ndarray:
    """The shard's features as a read-only memory map: pages are read only when touched."""
    try:
        return np.load(features_path(path), mmap_mode="r")
    except (OSError, ValueError) as error:
        raise InputError(f"{features_path(path)}: unreadable shard features: {error}") from None


def take_utterance(index: ShardIndex, features: np.ndarray, i: int, mean=None, std=None) -> Utterance:
    """Utterance i of a shard as float32, normalized with (mean, std) when given."""
    frames = features[index.frame_offsets[i] : index.frame_offsets[i + 1]].astype(np.float32)
    if mean is not None:
        frames = (frames - mean) / std
    labels = index.labels[index.label_offsets[i] : index.label_offsets[i + 1]]
    return Utterance(str(index.ids[i]), frames, labels, str(index.transcripts[i]))


def read_shard(path: Path, mean: np.ndarray | None = None, std: np.ndarray | None = None) -> list[Utterance]:
    """A shard's utterances, normalized with (mean, std) when given."""
    index, features = read_index(path), map_features(path)
    return [take_utterance(index, features, i, mean, std) for i in range(len(index))]


class FeatureStore:
    """A prepared store: store.json (splits, shards, counts), stats.npz and the shards."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._indexes: dict[Path, ShardIndex] = {}
        self._maps: OrderedDict[Path, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        description = root / STORE_FILE
        try:
            self.description = json.loads(description.read_text(encoding="utf-8"))
            with np.load(root / STATS_FILE) as stats:
                self.mean = stats["mean"].astype(np.float32)
                self.std = stats["std"].astype(np.float32)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"{root}: not a prepared feature store ({error})") from None
        version = self.description.get("version")
        if version != FORMAT_VERSION:
            raise InputError(f"{root}: feature store format {version}, this benchbase reads {FORMAT_VERSION}; "
                             "prepare it again")

    @staticmethod
    def exists(root: Path) -> bool:
        return (root / STORE_FILE).is_file() and (root / STATS_FILE).is_file()

    def has(self, subset: str) -> bool:
        return subset in self.description["splits"]

    def shards(self, subsets: tuple[str, ...] | list[str]) -> list[Path]:
        """Shard files of the named subsets, in subset order."""
        return [self.root / name for subset in subsets for name in self._split(subset)["shards"]]

    def utterance_count(self, subsets: tuple[str, ...] | list[str]) -> int:
        return sum(int(self._split(subset)["utterances"]) for subset in subsets)

    def longest(self, subsets: tuple[str, ...] | list[str]) -> tuple[int, int]:
        """(frames, labels) of the longest utterance and the longest transcript in the subsets."""
        frames = labels = 0
        for shard in self.shards(subsets):
            index = self.index(shard)
            frames = max(frames, int(index.frames().max(initial=0)))
            labels = max(labels, int(np.diff(index.label_offsets).max(initial=0)))
        return frames, labels

    def _split(self, subset: str) -> dict:
        splits = self.description["splits"]
        if subset not in splits:
            raise InputError(f"{self.root}: no subset {subset!r} prepared; available: {', '.join(sorted(splits))}")
        return splits[subset]

    def read(self, shard: Path) -> list[Utterance]:
        """Every utterance of a shard, normalized."""
        return read_shard(shard, self.mean, self.std)

    def index(self, shard: Path) -> ShardIndex:
        """A shard's index, read once and kept (for random access by the bucketing sampler)."""
        if shard not in self._indexes:
            self._indexes[shard] = read_index(shard)
        return self._indexes[shard]

    def read_utterances(self, picks: list[tuple[Path, int]]) -> list[Utterance]:
        """Utterances by (shard, position), normalized; touches only their pages of the shards."""
        return [take_utterance(self.index(shard), self._features(shard), i, self.mean, self.std) for shard, i in picks]

    def _features(self, shard: Path) -> np.ndarray:
        # A bounded set of open maps: a 960 h store has thousands of shards, each map holds a descriptor.
        with self._lock:
            if shard in self._maps:
                self._maps.move_to_end(shard)
                return self._maps[shard]
            self._maps[shard] = map_features(shard)
            if len(self._maps) > OPEN_MAPS:
                self._maps.popitem(last=False)
            return self._maps[shard]

    @property
    def feature_dimension(self) -> int:
        return int(self.mean.shape[0])

    @property
    def tokens(self) -> dict:
        """The vocabulary its labels are in: store.json's ``vocabulary`` (kind, its settings, the
        model file's SHA-256), or characters for a store without one."""
        return self.description.get("vocabulary") or {"kind": "characters"}
