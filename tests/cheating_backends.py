"""Three backends that cheat, written as a hostile plugin author would write them.

A backend is arbitrary code in benchbase's process: it can read any file, walk the objects
of the interpreter, and train on whatever it likes. benchbase therefore does not trust what a
backend does, only what it can check. Each backend here is the PyTorch backend with one
cheat, and each docstring names the defence that catches it:

- ``OracleBackend`` ("oracle"): predict() answers from the transcripts of the feature store it
  finds on disk. Caught by independent scoring (the reference model on the exported weights).
- ``DoubleStepBackend`` ("double_step"): two optimizer updates per batch.
- ``DevDataBackend`` ("dev_data"): trains on the dev-clean utterances it is scored on.

The last two predict honestly from weights they really trained, so independent scoring
passes them; they converge in fewer epochs than the reference backend's distribution allows,
which the reference convergence points (``benchbase rcp check``) catch.

They are tests' fixtures, never installed: ``register_cheaters(manager)`` registers them in a
plugin manager built with ``load_entrypoints=False`` (tests/test_cheating_backends.py,
benchmarks/rcp_cheaters.py). A cheater that finds nothing to cheat with raises instead of
training honestly, so that no test of a defence passes because the cheat silently failed.
"""

from __future__ import annotations

import gc
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pluggy
from benchbase_torch_ds2.backend import TorchBackend

import benchbase
from benchbase.backend import Batch, BuildContext, Inputs
from benchbase.data.pipeline import BatchPipeline, pad_batch
from benchbase.data.store import FeatureStore, Utterance
from benchbase.data.workload_data import default_cache

__all__ = ["CHEATERS", "DevDataBackend", "DoubleStepBackend", "OracleBackend", "find_feature_stores",
           "register_cheaters", "spelled_log_probs"]

SCORED_SUBSET = "dev-clean"
"""The subset ds2's TTA rule scores: what a cheater wants to be good at (it reads the docs too)."""
CONFIDENT = 1e-6
"""The probability the oracle leaves to every symbol it did not choose."""


# ------------------------------------------------------------------ what a cheater can find


def find_feature_stores() -> list[Path]:
    """Every prepared feature store this process can reach, the run's own first.

    Nothing benchbase hands a backend names the store; a plugin finds it anyway: the
    harness's open pipelines hold their ``FeatureStore`` (the garbage collector lists every
    live object), other stores may be open too, the command line may say ``--data``, and
    benchbase's cache folder holds the synthetic corpus's store and the conformance kit's.
    """
    alive = gc.get_objects()  # type(), not isinstance(): some live proxies warn when asked their __class__
    found = [thing.store.root for thing in alive if issubclass(type(thing), BatchPipeline)]
    found += [thing.root for thing in alive if issubclass(type(thing), FeatureStore)]
    found += [Path(value) for flag, value in zip(sys.argv, sys.argv[1:]) if flag == "--data"]
    cache = default_cache()
    if cache.is_dir():
        found += [description.parent for pattern in ("*/store.json", "*/*/store.json")
                  for description in sorted(cache.glob(pattern))]
    unique = dict.fromkeys(path.resolve() for path in found)
    return [path for path in unique if FeatureStore.exists(path)]


def held_out_utterances(store: FeatureStore, subsets: list[str] | None = None) -> Iterator[Utterance]:
    """The named subsets' utterances (default: every one but the training split's), normalized
    exactly as the harness's pipeline normalizes them (``FeatureStore.read``)."""
    names = subsets if subsets is not None else [name for name in store.description["splits"]
                                                 if not name.startswith("train")]
    for shard in store.shards([name for name in names if store.has(name)]):
        yield from store.read(shard)


def fingerprint(features: np.ndarray) -> str:
    """An utterance's identity: the bytes of its normalized float32 features, padding cut off."""
    return hashlib.sha1(np.ascontiguousarray(features, dtype=np.float32).tobytes()).hexdigest()


def spelled_log_probs(labels: np.ndarray, frames: int, valid: int, symbols: int, blank: int) -> np.ndarray:
    """(frames, symbols) log-probabilities whose best path is ``labels``: each label on one frame,
    spread evenly over the ``valid`` frames, a blank between repeated labels and on every other
    frame, with probability 1 - (symbols - 1) * CONFIDENT for the chosen symbol."""
    tokens: list[int] = []
    for label in labels.tolist():
        if tokens and tokens[-1] == label:
            tokens.append(blank)  # CTC collapses repeats: "ll" needs a blank between the two
        tokens.append(label)
    tokens = tokens[:valid]
    path = np.full(frames, blank)
    if tokens:
        path[(np.arange(len(tokens)) * valid) // len(tokens)] = tokens  # strictly increasing frames
    log_probs = np.full((frames, symbols), np.log(CONFIDENT), dtype=np.float32)
    log_probs[np.arange(frames), path] = np.log1p(-(symbols - 1) * CONFIDENT)
    return log_probs


# ------------------------------------------------------------------ the cheaters


class OracleBackend(TorchBackend):
    """Trains honestly, but predict() looks each utterance up in the feature stores it finds
    (by the bytes of its normalized features) and returns near-certain log-probabilities that
    spell its transcript, CER about 0. It never touches a label the harness hands it.

    Caught by independent scoring: the reference model on the backend's exported weights
    predicts something else, so the run ends ``aborted`` with stop reason
    ``prediction_mismatch`` at its first evaluation, and ``benchbase check`` fails rule
    ``independent_scoring``.
    """

    name = "oracle"
    description = "cheats: predict() reads transcripts from the feature store it finds on disk"

    def predict(self, inputs: Inputs) -> np.ndarray:
        log_probs = super().predict(inputs)  # the honest answer, for anything it cannot look up
        answers = self._answers()
        for row in range(inputs.size):
            labels = answers.get(fingerprint(inputs.features[row, : inputs.feature_lengths[row]]))
            if labels is not None:
                log_probs[row] = spelled_log_probs(labels, log_probs.shape[1], int(inputs.output_lengths[row]),
                                                   self.spec.symbols, self.spec.ctc_blank_index)
        return log_probs

    def _answers(self) -> dict[str, np.ndarray]:
        """Fingerprint -> labels of every held-out utterance found, gathered at the first predict()
        (by then the harness has its store open)."""
        if "answers" not in self.__dict__:
            stores = [FeatureStore(root) for root in find_feature_stores()]
            self.answers = {fingerprint(utterance.features): utterance.labels for store in stores
                            if store.feature_dimension == self.context.feature_dimension
                            for utterance in held_out_utterances(store)}
            if not self.answers:
                raise RuntimeError("the oracle found no feature store to read transcripts from")
        return self.answers


class DoubleStepBackend(TorchBackend):
    """Two optimizer updates per train_step, the second on the same batch; returns the first
    loss, so the log's losses look like one step's.

    Independent scoring passes it (its predict() is honest). Caught by the reference
    convergence points: it converges in fewer epochs than the reference backend's
    distribution allows (``benchbase rcp check``).
    """

    name = "double_step"
    description = "cheats: two optimizer updates per batch"

    def train_step(self, batch: Batch) -> float:
        loss = super().train_step(batch)
        super().train_step(batch)
        return loss


class DevDataBackend(TorchBackend):
    """At build time reads the dev-clean utterances (features and labels) from the feature store
    it finds, and after each training step trains one more step on a batch of them (cycling
    through them); returns the training batch's loss.

    Independent scoring passes it (its predict() is honest). Caught by the reference
    convergence points: training on the subset it is scored on, it converges in fewer epochs
    than the reference backend's distribution allows (``benchbase rcp check``).
    """

    name = "dev_data"
    description = "cheats: also trains on the dev-clean utterances it is scored on"

    def build(self, context: BuildContext) -> None:
        super().build(context)
        self.dev = scored_utterances(context.feature_dimension)
        self.dev_steps = 0

    def train_step(self, batch: Batch) -> float:
        loss = super().train_step(batch)
        super().train_step(self.dev_batch(self.dev_steps, batch.size))
        self.dev_steps += 1
        return loss

    def dev_batch(self, step: int, size: int) -> Batch:
        """The ``step``-th batch of ``size`` dev-clean utterances, cycling through them in store order."""
        start = step * size
        picked = [self.dev[(start + offset) % len(self.dev)] for offset in range(size)]
        return pad_batch(picked, self.spec)


def scored_utterances(feature_dimension: int) -> list[Utterance]:
    """The scored subset's utterances from the first store found that holds it (the run's own,
    when the harness has it open)."""
    for root in find_feature_stores():
        store = FeatureStore(root)
        if store.has(SCORED_SUBSET) and store.feature_dimension == feature_dimension:
            return list(held_out_utterances(store, [SCORED_SUBSET]))
    raise RuntimeError(f"dev_data found no feature store holding {SCORED_SUBSET!r}")


CHEATERS: tuple[type[TorchBackend], ...] = (OracleBackend, DoubleStepBackend, DevDataBackend)


class CheatersPlugin:
    """A benchbase plugin registering the three cheaters (the classes: torch is imported already)."""

    @benchbase.hookimpl
    def register_backends(self, register) -> None:
        for cheater in CHEATERS:
            register(cheater)


def register_cheaters(manager: pluggy.PluginManager) -> None:
    """Register the cheaters in ``manager`` (one built with ``load_entrypoints=False``)."""
    manager.register(CheatersPlugin(), name="cheaters")
