"""The cheating backends of tests/cheating_backends.py really cheat, and benchbase's defences see it.

Each cheat is first shown to work where no defence looks (the oracle's predict() spells
dev-clean's transcripts; double_step updates twice; dev_data trains on dev-clean), then run
through the harness on the small store: independent scoring aborts the oracle's run at its
first evaluation, and passes the two whose predict() is honest, whose faster convergence the
reference convergence points catch (benchmarks/rcp_cheaters.py makes their runs).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("benchbase_torch_ds2")

from benchbase_torch_ds2.backend import TorchBackend
from cheating_backends import (
    DevDataBackend,
    DoubleStepBackend,
    OracleBackend,
    register_cheaters,
    spelled_log_probs,
)

from benchbase.backend import Backend, Batch, DevicePlan
from benchbase.compliance.checker import check_paths
from benchbase.compliance.keys import INDEPENDENT_SCORE
from benchbase.data.alphabet import decode_labels
from benchbase.data.store import FeatureStore
from benchbase.decode import greedy_decode
from benchbase.errors import PredictionMismatch
from benchbase.harness import run_benchmark
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.metrics import error_rates
from benchbase.numerics.tolerances import same_kernels
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig

SCORED = "dev-clean"


def _config(store: Path, out: Path, backend: str = "torch", max_epochs: int = 2) -> RunConfig:
    manager = get_plugin_manager(load_entrypoints=False)
    register_cheaters(manager)
    registry = collect_registry(manager)
    workload = registry.workload("ds2-mini").model_copy(update={"max_epochs": max_epochs})
    return RunConfig(workload=workload, backend=backend, hardware=registry.profile("cpu"), seed=0, out=out, data=store)


def _run(cheater: str, store: Path, out: Path) -> None:
    manager = get_plugin_manager(load_entrypoints=False)
    register_cheaters(manager)
    run_benchmark(_config(store, out, cheater), manager, collect_registry(manager).backend(cheater))


def _built(backend_class: type[Backend], config: RunConfig, store: FeatureStore) -> Backend:
    """A backend built as the harness builds it for ``config``: one CPU, a thread budget of one."""
    batch = config.hardware.pipeline.global_batch
    backend = backend_class()
    backend.build(build_context(config, store, DevicePlan(kind="cpu", count=1, batch_per_device=batch, threads=1)))
    return backend


def _events(run: Path, key: str) -> list[dict]:
    events = [json.loads(line.split(" ", 1)[1]) for line in (run / "mllog.log").read_text().splitlines()]
    return [event for event in events if event["key"] == key]


def _finding(run: Path, rule: str):
    [report] = check_paths([run], workloads=collect_registry(get_plugin_manager(load_entrypoints=False)).workloads)
    return next(finding for finding in report.findings if finding.rule == rule)


# ------------------------------------------------------------------ the cheats work


def test_the_spelled_log_probs_decode_to_the_labels_repeats_included():
    labels = np.array([3, 3, 7, 1, 1, 1])
    log_probs = spelled_log_probs(labels, frames=20, valid=15, symbols=30, blank=0)
    assert np.allclose(np.exp(log_probs.astype(np.float64)).sum(-1), 1.0, atol=1e-6)
    assert greedy_decode(log_probs[None], np.array([15])) == [decode_labels(labels)]


def test_the_oracle_spells_dev_clean_without_being_handed_a_label(small_store, tmp_path):
    config = _config(small_store, tmp_path / "unused")
    store = FeatureStore(small_store)
    pipeline = run_pipeline(config, store, (SCORED,), training=False)  # the harness's dev batches, open
    oracle, honest = _built(OracleBackend, config, store), _built(TorchBackend, config, store)
    try:
        references, spelled, guessed = [], [], []
        for batch in pipeline.epoch(1):
            inputs = batch.inputs()  # features and lengths: what the harness hands predict()
            references += batch.transcripts
            spelled += greedy_decode(oracle.predict(inputs), inputs.output_lengths)
            guessed += greedy_decode(honest.predict(inputs), inputs.output_lengths)
    finally:
        oracle.close()
        honest.close()
    assert len(references) == store.utterance_count([SCORED])
    assert error_rates(references, spelled).paper_cer < 1.0
    assert error_rates(references, guessed).paper_cer > 50.0  # the same untrained weights, honestly


def test_double_step_updates_twice_on_the_batch_and_reports_the_first_loss(small_store, tmp_path):
    config = _config(small_store, tmp_path / "unused")
    store = FeatureStore(small_store)
    batch = _training_batch(config, store)
    # One backend after the other: each build seeds torch's generator, which draws the dropout masks.
    with _closing(_built(DoubleStepBackend, config, store)) as cheater:
        cheated_loss = cheater.train_step(batch)
        steps = {int(state["step"]) for state in cheater.optimizer.state.values()}
        cheated = cheater.export_weights()
    with _closing(_built(TorchBackend, config, store)) as honest:
        honest_loss = honest.train_step(batch)
        honest.train_step(batch)
        expect_same_weights(cheated, honest.export_weights())
    assert steps == {2}
    assert abs(cheated_loss - honest_loss) <= same_kernels(honest_loss)


def test_dev_data_trains_a_dev_clean_batch_after_every_step(small_store, tmp_path):
    config = _config(small_store, tmp_path / "unused")
    store = FeatureStore(small_store)
    batch = _training_batch(config, store)
    dev_ids = {utterance.utterance_id for shard in store.shards([SCORED]) for utterance in store.read(shard)}
    with _closing(_built(DevDataBackend, config, store)) as cheater:
        assert {utterance.utterance_id for utterance in cheater.dev} == dev_ids
        dev_batch = cheater.dev_batch(0, batch.size)
        cheated_loss = cheater.train_step(batch)
        cheated = cheater.export_weights()
        cheater.train_step(batch)
        assert cheater.dev_steps == 2 and set(cheater.dev_batch(1, batch.size).utterance_ids) <= dev_ids
    with _closing(_built(TorchBackend, config, store)) as honest:
        honest_loss = honest.train_step(batch)
        honest.train_step(dev_batch)
        expect_same_weights(cheated, honest.export_weights())
    assert abs(cheated_loss - honest_loss) <= same_kernels(honest_loss)


def _training_batch(config: RunConfig, store: FeatureStore) -> Batch:
    epoch = run_pipeline(config, store, config.workload.data.train, training=True).epoch(1)
    try:
        return next(iter(epoch))
    finally:
        epoch.close()


@contextlib.contextmanager
def _closing(backend: Backend) -> Iterator[Backend]:
    try:
        yield backend
    finally:
        backend.close()


def expect_same_weights(found: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """The same kernels on the same inputs in the same order: equal to a handful of roundings."""
    for name, array in expected.items():
        assert np.abs(found[name] - array).max() <= same_kernels(array), name


# ------------------------------------------------------------------ the defences see them


@pytest.mark.slow
def test_independent_scoring_aborts_the_oracle_at_its_first_evaluation(small_store, tmp_path):
    out = tmp_path / "oracle"
    with pytest.raises(PredictionMismatch, match="dev-clean"):
        _run("oracle", small_store, out)
    # Stopped by an error, as a non-finite loss stops a run: the log says why, and no result.json claims a score.
    [stop] = _events(out, "run_stop")
    assert (stop["metadata"]["status"], stop["metadata"]["stop_reason"]) == ("aborted", "prediction_mismatch")
    [score] = _events(out, INDEPENDENT_SCORE)
    assert score["metadata"]["epoch_num"] == 1 and score["value"]["agree"] is False
    assert {event["metadata"]["epoch_num"] for event in _events(out, "eval_accuracy")} == {1}
    assert _finding(out, "independent_scoring").status == "fail"


@pytest.mark.slow
@pytest.mark.parametrize("cheater", ["double_step", "dev_data"])
def test_a_cheater_with_an_honest_predict_passes_independent_scoring(small_store, tmp_path, cheater):
    # What catches these is the reference convergence points, on real ds2-mini runs
    # (benchmarks/rcp_cheaters.py), not a 2-epoch run on the small store.
    out = tmp_path / cheater
    _run(cheater, small_store, out)
    result = json.loads((out / "result.json").read_text())
    assert (result["status"], result["stop_reason"], result["epochs"]) == ("aborted", "max_epochs", 2)
    scores = _events(out, INDEPENDENT_SCORE)
    assert len(scores) >= 2 and all(score["value"]["agree"] for score in scores)
    assert _finding(out, "independent_scoring").status == "pass"


def test_the_cheaters_register_under_their_names():
    manager = get_plugin_manager(load_entrypoints=False)
    register_cheaters(manager)
    registry = collect_registry(manager)
    assert {name: registry.backend(name) for name in ("oracle", "double_step", "dev_data")} == {
        "oracle": OracleBackend, "double_step": DoubleStepBackend, "dev_data": DevDataBackend}
