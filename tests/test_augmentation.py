"""SpecAugment as the harness's data: masks drawn from (seed, epoch, batch), applied to training
batches only, the same for every backend, and off for every workload that does not ask for it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_benchbase

from benchbase.backend import Batch, Inputs
from benchbase.data.augmentation import draw_masks, mask_generator, spec_augment, training_batch
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.errors import InputError
from benchbase.specs import RunConfig, SpecAugmentSpec, WorkloadSpec
from benchbase.specs.overrides import apply_overrides, open_changes

ALGOPERF = SpecAugmentSpec()
"""AlgoPerf's Conformer masks: 2 x up to 27 bins, 10 x up to 5% of the utterance."""


def _batches(store: Path, workload: WorkloadSpec, count: int, batch_size: int = 16) -> list[Batch]:
    epoch = BatchPipeline(FeatureStore(store), workload.data.train, batch_size, model=workload.model, seed=0).epoch(1)
    try:
        return [next(epoch) for _ in range(count)]
    finally:
        epoch.close()


@pytest.fixture(scope="module")
def batches(small_store, mini_workload) -> list[Batch]:
    return _batches(small_store, mini_workload, 3)


def _changed(before: Batch, after: Batch) -> np.ndarray:
    """(rows, frames, bins) booleans: where ``after``'s features differ from ``before``'s."""
    return before.features != after.features


def test_masks_lie_within_each_utterances_own_frames(batches):
    spec = SpecAugmentSpec(mask_value=-7.5)  # a value no normalized feature of the batch holds
    for index, batch in enumerate(batches, start=1):
        masked = spec_augment(batch, spec, seed=0, epoch=1, batch_index=index)
        changed = _changed(batch, masked)
        assert changed.any()
        assert np.all(masked.features[changed] == -7.5)
        for row, frames in enumerate(batch.feature_lengths):
            assert not changed[row, frames:].any()  # the padding stays the zeros the contract promises
        assert masked.features.dtype == np.float32 and masked.features.flags.c_contiguous


def test_everything_but_the_features_is_the_batchs_own(batches):
    batch = batches[0]
    masked = spec_augment(batch, ALGOPERF, seed=0, epoch=1, batch_index=1)
    for name in ("feature_lengths", "output_lengths", "labels", "label_lengths", "utterance_ids", "transcripts"):
        assert getattr(masked, name) is getattr(batch, name), name


def test_masks_are_as_many_and_as_wide_as_the_spec_allows(batches):
    for spec in (ALGOPERF, SpecAugmentSpec(time_mask_max_frames=40, frequency_masks=3, frequency_mask_max_bins=9)):
        for index, batch in enumerate(batches, start=1):
            frames = batch.feature_lengths.astype(np.int64)
            bins = batch.features.shape[2]
            masks = draw_masks(spec, frames, bins, mask_generator(0, 1, index))
            assert masks.time_starts.shape == masks.time_widths.shape == (batch.size, spec.time_masks)
            assert masks.frequency_starts.shape == masks.frequency_widths.shape == (batch.size, spec.frequency_masks)
            time_ends = masks.time_starts + masks.time_widths
            frequency_ends = masks.frequency_starts + masks.frequency_widths
            assert np.all(masks.time_starts >= 0) and np.all(time_ends <= frames[:, None])
            assert np.all(masks.frequency_starts >= 0) and np.all(frequency_ends <= bins)
            assert np.all(masks.frequency_widths < spec.frequency_mask_max_bins)  # floor(u * 27), u < 1
            if spec.time_mask_max_frames is not None:
                assert np.all(masks.time_widths < spec.time_mask_max_frames)


def test_a_time_mask_is_at_most_its_ratio_of_the_utterance():
    frames = np.array([19, 20, 100, 400, 1600, 3000])
    cap = np.maximum(np.floor(frames * 0.05), 1)[:, None]  # 0, 1, 5, 20, 80, 150 frames: at least one
    for spec in (ALGOPERF, SpecAugmentSpec(time_mask_max_frames=40)):
        widest = np.zeros_like(cap)
        for index in range(200):
            widths = draw_masks(spec, frames, 80, mask_generator(5, 1, index)).time_widths
            assert np.all(widths <= cap), spec
            widest = np.maximum(widest, widths.max(axis=1, keepdims=True))
        if spec.time_mask_max_frames is None:
            assert widest[0] == 0  # a 19-frame utterance's 5% is under a frame: floor(u * 0.95) = 0
        # The widest drawn reaches its bound: floor(u * 0.05 * frames), or floor(u * 40) under the cap.
        expected = cap - 1 if spec.time_mask_max_frames is None else np.minimum(cap, 39)
        assert np.all(widest[2:] >= expected[2:] - 1), (spec, widest.ravel())  # the cap is reached, not undershot


def test_the_same_key_draws_the_same_masks_and_another_key_others(batches):
    batch = batches[0]
    masked = spec_augment(batch, ALGOPERF, seed=3, epoch=2, batch_index=5).features
    assert np.array_equal(masked, spec_augment(batch, ALGOPERF, seed=3, epoch=2, batch_index=5).features)
    for seed, epoch, index in ((4, 2, 5), (3, 3, 5), (3, 2, 6)):
        assert not np.array_equal(masked, spec_augment(batch, ALGOPERF, seed, epoch, index).features)


def test_the_masks_are_apart_from_the_data_orders_random_stream():
    order = np.random.default_rng([3, 2]).random(4)  # the pipeline's generator for seed 3, epoch 2
    assert not np.array_equal(order, mask_generator(3, 2, 0).random(4))


def test_the_input_batch_is_left_as_it_was(batches):
    batch = batches[1]
    before = batch.features.copy()
    masked = spec_augment(batch, ALGOPERF, seed=0, epoch=1, batch_index=2)
    assert np.array_equal(batch.features, before)
    assert not np.shares_memory(masked.features, batch.features)


def test_without_augmentation_a_batch_is_trained_as_the_pipeline_cut_it(registry, batches):
    for name in ("ds2", "ds2-mini", "rnnt", "rnnt-mini"):
        assert registry.workload(name).augmentation is None, name
    for index, batch in enumerate(batches, start=1):
        assert training_batch(batch, None, seed=0, epoch=1, batch_index=index) is batch


def test_a_workload_without_augmentation_reads_and_compares_as_before(registry):
    registered = registry.workload("ds2-mini").model_dump(mode="json")
    assert registered["augmentation"] is None
    before_the_field = {key: value for key, value in registered.items() if key != "augmentation"}
    assert WorkloadSpec.model_validate(before_the_field).model_dump(mode="json") == registered
    assert open_changes(registered, before_the_field) == []  # an old config.json is still the closed workload
    augmented = {**registered, "augmentation": SpecAugmentSpec().model_dump(mode="json")}
    [change] = open_changes(registered, augmented)
    assert change.startswith("augmentation: None -> {'frequency_masks': 2")


def test_augmentation_is_set_whole_with_set(registry):
    workload = registry.workload("ds2-mini")
    assert apply_overrides(workload, [("augmentation", {})], "workload").augmentation == ALGOPERF
    chosen = apply_overrides(workload, [("augmentation", {"time_masks": 4, "time_mask_max_frames": 40})], "workload")
    assert chosen.augmentation == SpecAugmentSpec(time_masks=4, time_mask_max_frames=40)
    with pytest.raises(InputError, match=r"workload.augmentation is none \(off\); set it whole"):
        apply_overrides(workload, [("augmentation.time_masks", 4)], "workload")
    with pytest.raises(InputError, match="augmentation.time_mask_max_ratio"):
        apply_overrides(workload, [("augmentation", {"time_mask_max_ratio": 2})], "workload")


def test_workloads_show_prints_the_masks_where_set(registry):
    from benchbase.cli.spec_view import spec_rows

    workload = registry.workload("ds2-mini")
    assert ("augmentation", "none") in {row[:2] for row in spec_rows(workload)}
    shown = {path: value for path, value, _ in spec_rows(workload.model_copy(update={"augmentation": ALGOPERF}))}
    assert shown["augmentation.time_masks"] == "10" and shown["augmentation.frequency_mask_max_bins"] == "27"
    assert shown["augmentation.time_mask_max_frames"] == "none"


@pytest.mark.slow
def test_a_backend_trains_the_masked_batches_and_predicts_the_unmasked_ones(small_store, tmp_path, registry, pm):
    """In a run, train_step gets each training batch masked by its key; predict() gets the
    evaluation's batches and the training sentences' batches as the pipeline cut them."""
    torch_backend = pytest.importorskip("benchbase_torch_ds2.backend").TorchBackend
    from benchbase.harness.assembly import run_pipeline
    from benchbase.harness.runner import run_benchmark

    trained_by: dict[int, list[np.ndarray]] = {}
    predicted: list[np.ndarray] = []

    class RecordingBackend(torch_backend):
        def train_step(self, batch: Batch) -> float:
            trained_by.setdefault(id(self), []).append(batch.features.copy())
            return super().train_step(batch)

        def predict(self, inputs: Inputs):
            predicted.append(inputs.features.copy())
            return super().predict(inputs)

    workload = registry.workload("ds2-mini")
    workload = workload.model_copy(update={
        "max_epochs": 1, "augmentation": ALGOPERF,
        "evaluation": workload.evaluation.model_copy(update={"log_sentences_every": 1})})
    config = RunConfig(workload=workload, backend="torch", hardware=registry.profile("cpu"), seed=11,
                       out=tmp_path / "run", data=small_store, final_evaluation=False)
    run_benchmark(config, pm, RecordingBackend)
    trained = next(iter(trained_by.values()))  # the run's backend: the first step's replay builds a twin after it

    store = FeatureStore(small_store)
    expected = list(run_pipeline(config, store, workload.data.train, training=True).epoch(1))
    assert len(trained) == len(expected) > 1
    for index, (batch, features) in enumerate(zip(expected, trained, strict=True), start=1):
        assert np.array_equal(features, spec_augment(batch, ALGOPERF, 11, 1, index).features), index
        assert any(np.array_equal(seen, batch.features) for seen in predicted), index  # its sentences
    for subset in workload.data.dev:
        for batch in run_pipeline(config, store, (subset,), training=False).epoch(0):
            assert any(np.array_equal(seen, batch.features) for seen in predicted), subset


@pytest.mark.slow
def test_a_run_with_augmentation_set_trains_records_it_and_is_open(small_store, tmp_path):
    out = tmp_path / "augmented"
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--data",
                             str(small_store), "--out", str(out), "--max-epochs", "1", "--no-final-eval",
                             "--set", "workload.augmentation={time_masks: 4}", timeout=600)
    assert finished.returncode == 3, finished.stderr[-2000:]  # aborted at max_epochs: a status
    config, result = (json.loads((out / name).read_text()) for name in ("config.json", "result.json"))
    assert config["workload"]["augmentation"] == SpecAugmentSpec(time_masks=4).model_dump(mode="json")
    # A changed workload is the open division, and says what changed.
    assert config["division"] == result["division"] == "open"
    # (and the tests' small corpus is not ds2-mini's registered data, which the list names too)
    assert [change.split(":")[0] for change in config["open_changes"]] == [
        "augmentation", "data.corpus.seed", "data.corpus.utterances"]
    checked = run_benchbase("check", "--json", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]
