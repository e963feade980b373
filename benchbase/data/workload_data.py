"""Finding or building the feature store a workload trains on.

The synthetic corpus and its features are generated once into a cache folder
(BENCHBASE_CACHE, default ~/.cache/benchbase) and reused by every later run. The store's
name carries a hash of everything that shapes it, so a changed feature or filter setting
builds a new store instead of silently reusing a stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchbase.data.prepare import prepare_workload_store
from benchbase.data.registered import CORPUS_SEED
from benchbase.data.store import FORMAT_VERSION, FeatureStore
from benchbase.errors import InputError
from benchbase.specs import WorkloadSpec

__all__ = ["CORPUS_SEED", "StoreBuild", "default_cache", "ensure_workload_data", "store_key", "synthetic_paths"]


Progress = Callable[[str, int, int], None]

SECONDS_PER_UTTERANCE = 2.6
"""The synthetic corpus's median utterance (README, "Data"): the size estimate before it is spoken."""
STORED_BYTES_PER_VALUE = 2
"""A store keeps its features as float16 (benchbase.data.store)."""


@dataclass(frozen=True)
class StoreBuild:
    """A store about to be built in the cache, announced before the work begins."""

    workload: str
    store: Path
    utterances: int
    estimated_bytes: int
    """About what the store will take on disk: the corpus's seconds of speech as feature frames."""
    corpus: Path | None
    """The corpus to synthesize first; None when it is already there (another workload spoke it)."""


Announce = Callable[[StoreBuild], None]


def default_cache() -> Path:
    return Path(os.environ.get("BENCHBASE_CACHE") or Path.home() / ".cache" / "benchbase")


def ensure_workload_data(workload: WorkloadSpec, data: Path | None, cache: Path,
                         progress: Progress | None = None, building: Announce | None = None) -> Path:
    """The prepared store for the workload: ``data`` if given, else the synthetic cache. A store is
    shaped by the workload's features and model (``store_key``), so a workload of another family
    builds its own from the same corpus; ``building`` hears of it before the work begins."""
    if data is not None:
        if not FeatureStore.exists(data):
            raise InputError(f"{data}: not a prepared feature store (run `benchbase data prepare` first)")
        return data
    if workload.data.dataset != "synthetic":
        raise InputError(
            f"workload {workload.name!r} trains on LibriSpeech: pass --data DIR, "
            "a store made by `benchbase data prepare`"
        )
    return _ensure_synthetic(workload, cache, progress, building)


def _ensure_synthetic(workload: WorkloadSpec, cache: Path, progress: Progress | None,
                      building: Announce | None) -> Path:
    from benchbase.data.synth import synthesize_corpus

    utterances = workload.data.synthetic_utterances
    corpus, store = synthetic_paths(workload, cache)
    if FeatureStore.exists(store):
        return store
    if building is not None:
        spoken = corpus / "corpus.json"
        building(StoreBuild(workload.name, store, utterances, _estimated_bytes(workload, spoken),
                            None if spoken.is_file() else corpus))
    cache.mkdir(parents=True, exist_ok=True)
    synthesize_corpus(corpus, utterances=utterances, seed=CORPUS_SEED,
                      progress=_labelled(progress, "synthesizing speech"))
    prepare_workload_store(corpus, workload, store, progress=_labelled(progress, "extracting features"))
    return store


def synthetic_paths(workload: WorkloadSpec, cache: Path) -> tuple[Path, Path]:
    """Where the workload's synthetic corpus and its store are, or will be, in ``cache``."""
    from benchbase.data.synth.corpus import GENERATOR_VERSION

    # The generator's version is in the name: a newer generator builds a new corpus beside the old.
    corpus = cache / f"synthetic-v{GENERATOR_VERSION}-{workload.data.synthetic_utterances}-seed{CORPUS_SEED}"
    return corpus, cache / f"features-{corpus.name}-{store_key(workload)}"


def store_key(workload: WorkloadSpec) -> str:
    """A short hash of the settings that decide a store's contents."""
    model = workload.model
    shaping = {
        "format": FORMAT_VERSION,
        "features": workload.features.model_dump(),
        "max_duration": workload.data.max_duration,
        **model.store_shaping(),
        "subsets": [workload.data.train, workload.data.dev, workload.data.test],
    }
    if workload.data.tokens.kind != "characters":  # a store of characters keeps the key it had before pieces
        shaping["tokens"] = workload.data.tokens.model_dump()
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:10]


def _estimated_bytes(workload: WorkloadSpec, spoken: Path) -> int:
    """The store's size from the corpus's seconds of speech (its corpus.json), or from the median
    utterance before the corpus is spoken; utterances the model cannot use make it a little smaller."""
    try:
        seconds = float(sum(json.loads(spoken.read_text())["summary"]["seconds"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        seconds = workload.data.synthetic_utterances * SECONDS_PER_UTTERANCE
    features = workload.features
    return int(seconds * features.sample_rate / features.hop * features.dimension * STORED_BYTES_PER_VALUE)


def _labelled(progress: Progress | None, label: str):
    if progress is None:
        return None
    return lambda done, total: progress(label, done, total)
