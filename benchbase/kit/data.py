"""The conformance kit's data: a few real utterances, their fixed batches and the build context.

The speech is benchbase's own (eSpeak NG through ``benchbase.data.synth``), prepared into a
feature store with the same code a run uses, so a backend is tested on the features, lengths
and padding it will train on. The corpus is tiny and made once per machine, under
``default_cache() / "conformance-kit-<key>"``: built in a temporary folder and renamed into
place, so concurrent kits never see half of one.

Batches are cut in a fixed order from the training split (no shuffling, no reader threads:
the thread-budget rule measures the process's CPU time, and nothing but the backend may
spend it). One more batch, the first one's utterances with one of them truncated so that its
labels no longer fit its output frames, holds an impossible alignment, which the spec's CTC
counts as zero loss; only the loss and BatchNorm rules train on it, so that a backend that
mishandles it fails those rules and no others.

Each model family the kit proves gets its own ``KitData`` from the same utterances
(``load_kit_data(family=...)``), with the family's own small model and optimizer
(``FamilyParts.kit_model``): any family, a plugin's included. The family also says how short the
impossible row must be cut (``FamilyParts.impossible_frames``): CTC needs an output frame per
label, a transducer one encoder frame for any labels.

The labels are the corpus's characters while the model predicts as many symbols as the store's
alphabet (every kit model does). A kit model made wider or narrower (``load_kit_data(symbols=N)``,
``benchbase backend-test --symbols N``: up to 1024, as a subword vocabulary's model predicts)
gets labels of its own instead, a piece set with no sentencepiece model: each utterance keeps
its number of labels, drawn at random (seeded) from the model's symbols other than the blank, no
label equal to the one before it where the symbols allow (a character never repeats either, so
every row aligns as its characters do, and the cut row stays impossible; at 2 symbols, one label
over and over, CTC needs a blank between each two, and the kit's rows have room for them).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from benchbase.backend import Batch, BuildContext, DeviceKind, DevicePlan, Inputs
from benchbase.data.pipeline import pad_batch
from benchbase.data.store import FeatureStore, Utterance
from benchbase.data.workload_data import default_cache, store_key
from benchbase.errors import BenchbaseError, InputError
from benchbase.families.parts import CheckedParts, parts_of_family
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs import ModelSpec, OptimizerSpec, WorkloadSpec

__all__ = ["KIT_BATCH_SIZE", "KIT_WORKLOAD", "KitData", "ensure_kit_store", "kit_model", "load_kit_data"]

KIT_WORKLOAD = "ds2-mini"
"""Whose features the kit's store holds (the kit's speech, prepared as this workload prepares it)."""
KIT_BATCH_SIZE = 6
"""Small, so that the float64 NumPy reference runs in a fraction of a second."""
KIT_BATCHES = 3
SMALL_BATCH_SIZE = 3
"""Rows of the smaller inputs (a last dev batch is smaller than the others)."""
KIT_UTTERANCES = 30
"""Utterances synthesized: train gets all but one per held-out subset (22 of 30)."""
KIT_CORPUS_SEED = 11
KIT_DATA_VERSION = 2
"""Bumped whenever the kit's corpus or its preparation changes."""
IMPOSSIBLE_ROW = 1
"""The row of the first batch whose alignment is made impossible."""
KIT_LABEL_SEED = 13
"""Seeds the labels of a kit model of other symbols than the alphabet's (with the symbols)."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class KitData:
    """Everything the rules feed a backend, fixed for a machine."""

    spec_model: ModelSpec
    """The workload's model as the spec has it (dropout included)."""
    model: ModelSpec
    """The model the reference checks use: the spec's without dropout (``FamilyParts.without_dropout``;
    the reference has none)."""
    optimizer: OptimizerSpec
    feature_dimension: int
    batches: tuple[Batch, ...]
    """KIT_BATCHES training batches of KIT_BATCH_SIZE, every alignment possible."""
    impossible_batch: Batch
    """batches[0] with row IMPOSSIBLE_ROW cut short: its labels cannot be aligned."""
    small_inputs: Inputs
    """SMALL_BATCH_SIZE rows that no training batch holds."""

    @property
    def max_frames(self) -> int:
        return max(int(item.features.shape[1]) for item in (*self.batches, self.small_inputs))

    @property
    def max_label_length(self) -> int:
        return max(int(batch.labels.shape[1]) for batch in self.batches)

    def context(self, seed: int, model: ModelSpec | None = None, threads: int | None = 1,
                device: DeviceKind = "cpu", optimizer: OptimizerSpec | None = None) -> BuildContext:
        """What ``build()`` receives: one device (a CPU unless ``device`` says cuda), the kit's batch
        size, a thread budget of one."""
        plan = DevicePlan(kind=device, count=1, batch_per_device=KIT_BATCH_SIZE, threads=threads)
        return BuildContext(model=model or self.model, optimizer=optimizer or self.optimizer,
                            feature_dimension=self.feature_dimension, plan=plan, seed=seed,
                            max_frames=self.max_frames, max_label_length=self.max_label_length)


def load_kit_data(cache: Path | None = None, progress: Progress | None = None, family: str = "ds2",
                  symbols: int | None = None) -> KitData:
    """The kit's batches for ``family``'s model, preparing the store first if this machine has none;
    ``symbols``: the model's output symbols (default: the kit model's own). An unknown family, or
    symbols the family's spec refuses, is an InputError."""
    kit_model(family, symbols)
    store = ensure_kit_store(cache or default_cache(), progress)
    return _kit_data(store, family, symbols)


def kit_model(family: str, symbols: int | None = None) -> ModelSpec:
    """``family``'s kit model (``FamilyParts.kit_model``) predicting ``symbols`` output symbols (None:
    its own), validated by its spec; an InputError for an unknown family or symbols out of bounds."""
    try:
        model = CheckedParts(parts_of_family(family), family).kit_model().model
    except BenchbaseError as error:
        raise InputError(f"the conformance kit cannot prove model family {family!r}: {error}") from None
    if symbols is None or symbols == model.symbols:
        return model
    try:
        return type(model).model_validate({**model.model_dump(), "symbols": symbols})
    except ValidationError as error:
        reasons = "; ".join(f"{'.'.join(map(str, problem['loc'])) or 'model'}: {problem['msg']}"
                            for problem in error.errors())
        raise InputError(f"the {family} kit model cannot predict {symbols} symbols ({reasons})") from None


@lru_cache(maxsize=8)
def _kit_data(store_root: Path, family: str = "ds2", symbols: int | None = None) -> KitData:
    workload = builtin_workload(KIT_WORKLOAD)
    parts = CheckedParts(parts_of_family(family), family)
    model, optimizer = kit_model(family, symbols), parts.kit_model().optimizer
    store = FeatureStore(store_root)
    utterances = [u for shard in store.shards(workload.data.train) for u in store.read(shard)]
    needed = KIT_BATCHES * KIT_BATCH_SIZE + SMALL_BATCH_SIZE
    if len(utterances) < needed:
        raise BenchbaseError(f"{store_root}: the conformance kit needs {needed} training utterances, "
                             f"it holds {len(utterances)}; delete the folder to prepare it again")
    if model.symbols != workload.data.tokens.symbols:
        utterances = _drawn_labels(utterances, model)
    groups = [utterances[i * KIT_BATCH_SIZE : (i + 1) * KIT_BATCH_SIZE] for i in range(KIT_BATCHES)]
    cut_short = list(groups[0])
    impossible = cut_short[IMPOSSIBLE_ROW]
    frames = parts.impossible_frames(model, len(impossible.labels))
    cut_short[IMPOSSIBLE_ROW] = replace(impossible, features=impossible.features[:frames])
    small = utterances[KIT_BATCHES * KIT_BATCH_SIZE : needed]
    return KitData(
        spec_model=model,
        model=parts.without_dropout(model),
        optimizer=optimizer,
        feature_dimension=store.feature_dimension,
        batches=tuple(pad_batch(group, model) for group in groups),
        impossible_batch=pad_batch(cut_short, model),
        small_inputs=pad_batch(small, model).inputs(),
    )


def _drawn_labels(utterances: list[Utterance], model: ModelSpec) -> list[Utterance]:
    """``utterances`` with labels drawn from ``model``'s symbols but the blank, as many as each had,
    seeded, none equal to the one before it unless a single symbol is all there is."""
    choices = np.asarray([symbol for symbol in range(model.symbols) if symbol != model.blank_index], dtype=np.int32)
    generator = np.random.default_rng([KIT_LABEL_SEED, model.symbols])
    drawn = []
    for utterance in utterances:
        picks = np.zeros(len(utterance.labels), dtype=np.int64)
        for index in range(len(picks)):
            if index == 0 or len(choices) == 1:
                picks[index] = generator.integers(len(choices))
            else:  # any choice but the previous one
                pick = generator.integers(len(choices) - 1)
                picks[index] = pick + (pick >= picks[index - 1])
        drawn.append(replace(utterance, labels=choices[picks]))
    return drawn


def ensure_kit_store(cache: Path, progress: Progress | None = None) -> Path:
    """The kit's prepared feature store under ``cache``, made now if absent (about a minute, once)."""
    workload = builtin_workload(KIT_WORKLOAD)
    final = cache / f"conformance-kit-{_kit_key(workload)}"
    store = final / "store"
    if FeatureStore.exists(store):
        return store
    if progress:
        progress(f"preparing the conformance kit's speech in {final} (once per machine)")
    partial = cache / f".{final.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        _prepare(workload, partial)
        try:
            partial.rename(final)
        except OSError:  # another process finished first: use its copy
            if not FeatureStore.exists(store):
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return store


def _prepare(workload: WorkloadSpec, folder: Path) -> None:
    from benchbase.data.prepare import prepare_workload_store
    from benchbase.data.synth import synthesize_corpus

    corpus = folder / "corpus"
    synthesize_corpus(corpus, utterances=KIT_UTTERANCES, seed=KIT_CORPUS_SEED)
    prepare_workload_store(corpus, workload, folder / "store")
    shutil.rmtree(corpus)  # the features are all the kit reads


def _kit_key(workload: WorkloadSpec) -> str:
    """A short hash of everything that shapes the kit's store."""
    from benchbase.data.synth.corpus import GENERATOR_VERSION

    shaping = {"kit": KIT_DATA_VERSION, "utterances": KIT_UTTERANCES, "seed": KIT_CORPUS_SEED,
               "generator": GENERATOR_VERSION, "store": store_key(workload)}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:10]
