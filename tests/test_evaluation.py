"""The harness's evaluation: each subset on its own, rates from the decoder, the validation loss
from the backend's log-probabilities, and the store dropped from the page cache."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from benchbase.backend import Inputs
from benchbase.data.page_cache import drop_from_page_cache
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.decode import GreedyDecoder
from benchbase.errors import BenchbaseError
from benchbase.families.ctc import CTCHead
from benchbase.harness.evaluation import evaluate_subsets, predicted_log_probs
from benchbase.numerics.tolerances import BOTH_SIDES, FLOAT64_UNIT_ROUNDOFF, accumulation_bound, ctc_recursion_bound


class SeededLogProbs:
    """Stands in for a trained backend's predict(): log-softmax of seeded logits, labels never seen."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def predict(self, inputs: Inputs) -> np.ndarray:
        frames = int(inputs.output_lengths.max())
        logits = self.rng.normal(0, 3, (len(inputs.output_lengths), frames, 30)).astype(np.float32)
        return torch.log_softmax(torch.from_numpy(logits), -1).numpy()


def _pipelines(store: FeatureStore, model, subsets) -> dict[str, BatchPipeline]:
    return {subset: BatchPipeline(store, (subset,), 16, model=model, shuffle=False, drop_last=False)
            for subset in subsets}


def test_each_subset_is_scored_on_its_own(small_store, mini_workload):
    store, model = FeatureStore(small_store), mini_workload.model
    subsets = mini_workload.data.dev
    results = evaluate_subsets(SeededLogProbs(0), _pipelines(store, model, subsets), CTCHead(GreedyDecoder(), model))
    assert list(results) == list(subsets)
    for subset, result in results.items():
        assert result.utterances == len(result.references) == store.utterance_count([subset])
        assert set(result.rates()) == {"wer", "cer", "paper_cer", "loss"}
    assert results["dev-clean"].references != results["dev-other"].references


def test_validation_loss_is_torchs_ctc_loss_on_the_same_log_probs(small_store, mini_workload):
    store, model = FeatureStore(small_store), mini_workload.model
    result = evaluate_subsets(SeededLogProbs(1), _pipelines(store, model, ["dev-clean"]),
                              CTCHead(GreedyDecoder(), model))["dev-clean"]
    # The same predictions again, scored by torch: the per-utterance NLL, impossible alignments as zero
    # (zero_infinity), averaged over utterances (the spec's mean_over_batch).
    backend, losses, frames = SeededLogProbs(1), [], []
    for batch in _pipelines(store, model, ["dev-clean"])["dev-clean"].epoch(0):
        log_probs, lengths = backend.predict(batch.inputs()), batch.output_lengths
        frames.extend(lengths.tolist())
        labels = torch.from_numpy(batch.labels.astype(np.int64))
        losses.append(torch.nn.functional.ctc_loss(
            torch.from_numpy(log_probs).double().transpose(0, 1), labels, torch.from_numpy(lengths).long(),
            torch.from_numpy(batch.label_lengths).long(), blank=model.ctc_blank_index, reduction="none",
            zero_infinity=True))
    every = torch.cat(losses).numpy()
    expected = float(every.mean())
    # The same float64 CTC twice (the harness's and PyTorch's) over the same float32 log-probs:
    # both recursions' rounding bounds, then the mean's.
    allowed = BOTH_SIDES * (ctc_recursion_bound(np.array(frames), every, FLOAT64_UNIT_ROUNDOFF)
                            + accumulation_bound(len(every), FLOAT64_UNIT_ROUNDOFF) * abs(expected))
    assert abs(result.loss - expected) <= allowed
    assert result.loss > 0


class Contract2Predictions(SeededLogProbs):
    """predict() as backend contract 2 had it: (log_probs, output_lengths)."""

    def predict(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
        return super().predict(inputs), inputs.output_lengths.copy()


def test_a_contract_2_tuple_is_an_error_naming_the_backend(small_store, mini_workload):
    inputs = next(iter(_pipelines(FeatureStore(small_store), mini_workload.model, ["dev-clean"])["dev-clean"]
                       .epoch(0))).inputs()
    with pytest.raises(BenchbaseError, match=r"Contract2Predictions.predict\(\) returned a tuple, "
                                             r"as backend contract 2 did"):
        predicted_log_probs(Contract2Predictions(3), inputs)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this OS")
def test_cache_clear_asks_the_os_to_drop_every_store_file(small_store, tmp_path):
    assert drop_from_page_cache(small_store) is True
    unreadable = tmp_path / "store"
    unreadable.mkdir()
    (unreadable / "shard.npz").write_bytes(b"x")
    (unreadable / "shard.npz").chmod(0)
    if os.geteuid() != 0:  # root reads any file
        assert drop_from_page_cache(unreadable) is False
