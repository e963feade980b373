"""Whether a store holds a workload's registered data: what a closed run must have trained on.

MLPerf's closed division fixes the dataset; a time to accuracy on a subset says nothing about
the benchmark. A store records the corpus it was prepared from (``corpus_record``, in store.json)
and how many utterances each subset listed, with a digest of their ids; a workload's registered
data is, for the synthetic corpus, the one benchbase generates for it (this generator version,
the corpus seed, the workload's ``synthetic_utterances``, the generator's own sentences), and for
LibriSpeech, every subset it names at its official utterance count. ``data_departures`` lists how
a store departs from it; a run on such a store is in the open division, and `benchbase check`
fails a log that claims the closed division on it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from benchbase.specs import WorkloadSpec

__all__ = ["CORPUS_SEED", "LIBRISPEECH_UTTERANCES", "corpus_record", "data_departures", "ids_digest",
           "store_data_record"]

CORPUS_SEED = 0
"""The seed of the corpus a synthetic workload trains on: part of the workload (--seed varies training only)."""

LIBRISPEECH_UTTERANCES = {
    "train-clean-100": 28_539, "train-clean-360": 104_014, "train-other-500": 148_688,
    "dev-clean": 2_703, "dev-other": 2_864, "test-clean": 2_620, "test-other": 2_939,
}
"""Utterances per subset of the LibriSpeech ASR corpus (openslr.org/12) as released: the 281,241
training utterances of 960 h and the four evaluation subsets."""



def corpus_record(root: Path) -> dict[str, Any]:
    """What a corpus folder is: benchbase's synthetic corpus with the parameters that made it, or a
    LibriSpeech-layout tree (whose identity is its subsets' counts and ids)."""
    from benchbase.data.synth.corpus import CORPUS_FILE, GENERATOR_NAME  # the generator's modules load only here

    try:
        made = json.loads((root / CORPUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        made = None
    if isinstance(made, dict) and made.get("generator") == GENERATOR_NAME:
        parameters = made.get("parameters") or {}
        return {"kind": "synthetic", **{key: parameters.get(key) for key in
                                        ("generator_version", "seed", "utterances", "text")}}
    return {"kind": "librispeech-layout"}


def ids_digest(utterance_ids: list[str]) -> str:
    """SHA-256 of a subset's utterance ids, sorted (the listing's order is the file system's)."""
    return hashlib.sha256("\n".join(sorted(utterance_ids)).encode()).hexdigest()


def store_data_record(description: dict) -> dict[str, Any]:
    """The data a store holds, as the log states it (``benchbase_data``): its corpus, and each
    subset's listed and kept utterances with the digest of the listed ids."""
    corpus = description.get("corpus")
    if corpus is None:  # a store prepared before stores recorded it: its corpus, if still there
        source = description.get("source")
        corpus = corpus_record(Path(source)) if source else {"kind": "unknown"}
        corpus = {**corpus, "recorded": False}
    subsets = {name: {"listed": split.get("listed"), "kept": split.get("utterances"),
                      "ids_sha256": split.get("ids_sha256")}
               for name, split in sorted(description.get("splits", {}).items())}
    return {"corpus": corpus, "subsets": subsets}


def data_departures(workload: WorkloadSpec, data: dict[str, Any]) -> list[str]:
    """How ``data`` (a ``store_data_record``) departs from the workload's registered data; [] when
    it is the registered data. Each entry reads "data.FIELD: registered -> this store's"."""
    from benchbase.data.synth.corpus import GENERATOR_VERSION

    corpus = data.get("corpus") if isinstance(data.get("corpus"), dict) else {}
    subsets = data.get("subsets") if isinstance(data.get("subsets"), dict) else {}
    spec = workload.data
    named = list(dict.fromkeys(spec.train + spec.dev + spec.test))
    if spec.dataset == "synthetic":
        registered = {"kind": "synthetic", "generator_version": GENERATOR_VERSION, "seed": CORPUS_SEED,
                      "utterances": spec.synthetic_utterances, "text": {"kind": "grammar"}}
        found = [f"data.corpus.{key}: {value!r} -> {corpus.get(key)!r}" for key, value in registered.items()
                 if corpus.get(key) != value]
    else:
        found = [f"data.corpus.kind: 'librispeech-layout' -> {corpus.get('kind')!r}"] \
            if corpus.get("kind") == "synthetic" else []
        for subset in named:
            official = LIBRISPEECH_UTTERANCES.get(subset)
            listed = (subsets.get(subset) or {}).get("listed")
            if official is None:
                found.append(f"data.{subset}: not a LibriSpeech subset")
            elif listed != official:
                found.append(f"data.{subset}: {official} utterances -> {listed}")
    missing = [subset for subset in named if subset not in subsets]
    return found + [f"data.{subset}: prepared -> missing from the store" for subset in missing]
