"""Independent scoring: predict() checked against the weights the backend exports.

A backend is arbitrary code in the process, and nothing stops its predict() from returning
log-probabilities it did not compute from its model (say, from transcripts it found on disk).
So after every evaluation, off the clock, the harness takes a sample of the scored subset,
computes what the backend's ``export_weights()`` predict for it with benchbase's NumPy
reference model, and compares with what predict() returned for the very same utterances
(``benchbase.families.agreement``: per utterance within the error model's tolerance). A
disagreement ends the run, aborted; no target counts from that evaluation.

The sample is a uniform one of the utterances as they stream past (reservoir sampling), by a
seed drawn when the evaluation starts from the operating system's entropy: predict() has
answered for an utterance before the harness decides to keep it, so a backend cannot tell
which of its answers will be checked, and lying on a share f of the utterances survives one
evaluation with a chance of about (1 - f)^n. The seed goes into the log with the result, so
the choice can be replayed.

Decoded texts are compared too: the reference's greedy or beam output beside the backend's.
They may differ only at a near tie (two symbols within the rounding tolerance), which the
log-probability comparison already accepts, so the count is reported, not judged.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from benchbase.backend import Batch
from benchbase.errors import PredictionMismatch
from benchbase.families.agreement import UtteranceOutputs, compare_with_reference
from benchbase.families.parts import EvaluationHead
from benchbase.specs import ModelSpec

__all__ = ["ROUNDING_DRAWS", "IndependentScore", "UtteranceSample", "score_sample"]

ROUNDING_DRAWS = 1
"""Rounding injections behind each tolerance. The kit takes ``INJECTION_DRAWS`` (16) because it
compares element by element, where one draw's sum of signed roundings can cancel; an utterance's
tolerance here is the largest bound over all its frames, which one draw already gives. One draw
keeps the re-scoring cheap, and its tolerance is still about a thousand times the honest
backends' differences (docs/BENCHMARKS.md, "Independent scoring"), while a lie is far above it."""


@dataclass(frozen=True)
class _Kept:
    outputs: UtteranceOutputs
    position: int
    """The utterance's place in the subset's evaluation order (its hypothesis's index)."""


class UtteranceSample:
    """A uniform sample of ``size`` utterances of ``subset`` (all of them when ``size`` is None),
    kept as evaluation streams them past: the observer that ``evaluate_subsets`` calls."""

    def __init__(self, subset: str, size: int | None, seed: int | None = None) -> None:
        self.subset = subset
        self.size = size
        self.seed = secrets.randbits(63) if seed is None else seed
        self._random = np.random.default_rng(self.seed)
        self._kept: list[_Kept] = []
        self._seen = 0

    def __call__(self, subset: str, batch: Batch, log_probs: np.ndarray) -> None:
        if subset != self.subset:
            return
        for row, utterance_id in enumerate(batch.utterance_ids):
            slot = self._slot()
            self._seen += 1
            if slot is None:
                continue
            kept = _Kept(UtteranceOutputs.of_row(utterance_id, batch, log_probs, row), self._seen - 1)
            if slot == len(self._kept):
                self._kept.append(kept)
            else:
                self._kept[slot] = kept

    def _slot(self) -> int | None:
        """Algorithm R: where the next utterance goes in the sample, or None when it is passed over."""
        if self.size is None or self._seen < self.size:
            return self._seen
        slot = int(self._random.integers(self._seen + 1))
        return slot if slot < self.size else None

    @property
    def kept(self) -> list[_Kept]:
        """The sample in evaluation order."""
        return sorted(self._kept, key=lambda kept: kept.position)


@dataclass(frozen=True)
class IndependentScore:
    """The reference's verdict on one evaluation's sample."""

    subset: str
    utterances: int
    seed: int
    disagreeing: tuple[str, ...]
    worst_ratio: float
    texts_differ: int
    seconds: float

    @property
    def agree(self) -> bool:
        return not self.disagreeing

    def record(self) -> dict:
        """The log's and result.json's account."""
        return {"utterances": self.utterances, "seed": self.seed, "disagreeing": list(self.disagreeing),
                "worst_ratio": round(self.worst_ratio, 6), "texts_differ": self.texts_differ,
                "seconds": round(self.seconds, 3), "agree": self.agree}

    def sentence(self) -> str:
        shown = ", ".join(self.disagreeing[:5]) + (" ..." if len(self.disagreeing) > 5 else "")
        return (f"predict() does not match the exported weights on {len(self.disagreeing)} of {self.utterances} "
                f"utterances of {self.subset} (worst by {self.worst_ratio:.3g} times the rounding tolerance; "
                f"{shown})")


def score_sample(sample: UtteranceSample, weights: Mapping[str, np.ndarray], model: ModelSpec, head: EvaluationHead,
                 hypotheses: list[str]) -> IndependentScore:
    """Compare the sample's predict() outputs with the reference on ``weights``; ``hypotheses``:
    the subset's decoded outputs in evaluation order, as the evaluation scored them."""
    started = time.perf_counter()
    kept = sample.kept
    try:
        agreement = compare_with_reference(weights, model, [item.outputs for item in kept], draws=ROUNDING_DRAWS)
    except ValueError as error:  # exported weights of the wrong layout, or outputs of the wrong shape
        raise PredictionMismatch(f"the exported weights cannot be re-scored: {error}") from None
    texts_differ = 0
    for item, reference in zip(kept, agreement.reference):
        decoded = head.decode(reference[None].astype(np.float32), np.array([reference.shape[0]], np.int32))[0]
        texts_differ += decoded != hypotheses[item.position]
    return IndependentScore(sample.subset, len(kept), sample.seed, tuple(agreement.disagreeing),
                            agreement.worst_ratio, texts_differ, time.perf_counter() - started)
