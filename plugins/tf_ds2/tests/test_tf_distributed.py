"""The TensorFlow backend on several devices: two logical CPUs stand in for two GPUs.

A plan of two CPU devices makes the backend split the host CPU into two logical devices, which
TensorFlow allows only before its first operation. The pytest process has usually started
TensorFlow already (other tests), so the two-device runs happen in a fresh interpreter: this
file run as a script (``main``), once per module, writing what it saw to an .npz file that the
tests below read. The single-replica runs it compares with happen in that interpreter too, on
the first of its two logical CPUs, so both sides run on the same TensorFlow set-up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
tf_backend = pytest.importorskip("benchbase_tf_ds2.backend")

import tensorflow as tf  # noqa: E402

from benchbase.backend import BuildContext, DevicePlan  # noqa: E402
from benchbase.data.pipeline import BatchPipeline  # noqa: E402
from benchbase.data.store import FeatureStore  # noqa: E402
from benchbase.errors import BenchbaseError  # noqa: E402
from benchbase.families.ds2.reference import batchnorm_names, bounded_reference, bounded_step  # noqa: E402
from benchbase.kit.int8 import range_update_rounding  # noqa: E402
from benchbase.kit.step_rules import largest_statistic_excess  # noqa: E402
from benchbase.numerics.tolerances import BOTH_SIDES, after_steps  # noqa: E402
from benchbase.plugin_host.builtins.workloads import builtin_workload  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

GLOBAL_BATCH = 8
REPLICAS = 2
STEPS = 10
QUANTIZED_STEPS = 3

# Tolerances (benchbase.numerics.tolerances): the two runs differ only in the order sums are
# added (each replica sums its half, then the all-reduce adds the halves; BatchNorm's
# statistics likewise), so every bound is float32's rounding bound, for both sides:
# - the first loss: the reference's bound of the loss at the initial weights on the first
#   batch (``bounded_step``), twice (BOTH_SIDES);
# - the k-th loss and the final weights: that bound compounded over k steps (``after_steps``,
#   rule 6 of the error model); the weights as a share of how far training moved them;
# - predictions: the two-replica model and a one-replica model holding the same weights, the
#   reference's elementwise bound of that forward pass, both sides;
# - BatchNorm's statistics after the first step: the reference's bounds, as the kit's rule;
# - int8 ranges after QUANTIZED_STEPS steps: the reference's rounding bound of the first
#   step's ranges, compounded. BatchNorm statistics taken per replica instead of over the
#   global batch miss the first loss by 1.2e-3 (relative), far outside its bound.


# --- what the fresh interpreter runs --------------------------------------------------------


class SliceRecordingBackend(tf_backend.TensorFlowBackend):
    """Records, at run time, which rows each replica's step receives."""

    slices_seen: list[list[int]] = []
    """Per replica and step: replica id, feature rows, label rows, then the output lengths it
    received, padded with -1 to GLOBAL_BATCH entries."""

    def _replica_step(self, features, feature_lengths, output_lengths, labels, label_lengths):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        seen = [replica, tf.shape(features)[0], tf.shape(labels)[0], output_lengths]
        recorded = tf.numpy_function(self._record, seen, tf.int64)
        with tf.control_dependencies([recorded]):
            return super()._replica_step(features, feature_lengths, output_lengths, labels, label_lengths)

    @classmethod
    def _record(cls, replica, feature_rows, label_rows, output_lengths):
        received = output_lengths.tolist() + [-1] * (GLOBAL_BATCH - len(output_lengths))
        cls.slices_seen.append([int(replica), int(feature_rows), int(label_rows), *received])
        return np.int64(0)


def main(store: Path, out: Path) -> None:
    workload = builtin_workload("ds2-mini")
    # No dropout: each replica draws its own masks (ReplicaDropout), so with dropout the two
    # runs would train on different masks and their losses could not be compared.
    model = workload.model.model_copy(update={"dropout": 0.0})
    batches = list(BatchPipeline(FeatureStore(store), ("train",), GLOBAL_BATCH, model=model, seed=0).epoch(0))[:STEPS]
    results: dict[str, np.ndarray] = {"frames": np.array([batch.features.shape[1] for batch in batches]),
                                      "output_lengths": np.stack([batch.output_lengths for batch in batches])}

    # First the two-replica run: its build splits the CPU before anything starts TensorFlow.
    two = _build(SliceRecordingBackend, workload, model, REPLICAS)
    results["devices"] = np.array(two.devices_in_use())
    initial = two.export_weights()
    results["initial_weights"] = _stacked(initial)
    first_step = bounded_step(initial, model, batches[0])
    results["first_loss_bound"] = np.array(BOTH_SIDES * first_step.loss_bound / abs(first_step.loss))  # relative
    first_loss = two.train_step(batches[0])
    results["statistics_excess"] = np.array(largest_statistic_excess(initial, two.export_weights(),
                                                                      batchnorm_names(model), first_step))
    results["two_losses"] = np.array([first_loss] + [two.train_step(batch) for batch in batches[1:]])
    results["two_weights"] = _stacked(two.export_weights())
    results["tracing_count"] = np.array(two._train_function.experimental_get_tracing_count())
    results["slices_seen"] = np.array(SliceRecordingBackend.slices_seen)
    results["diverged_copies"] = np.array(_diverged_copies(two), dtype=str)
    results["two_log_probs"] = two.predict(batches[0].inputs())
    trained = two.export_weights()
    inputs = batches[0].inputs()
    reference = bounded_reference(trained, model, inputs.features, inputs.feature_lengths, training=False)
    frames = reference.log_probs.shape[1]
    results["log_probs_bound"] = BOTH_SIDES * reference.log_probs_bound
    results["valid_frames"] = np.arange(frames)[None, :] < inputs.output_lengths[:, None]
    two.save_checkpoint(out.with_suffix(".checkpoint"))
    restored = _build(tf_backend.TensorFlowBackend, workload, model, REPLICAS, seed=1)
    restored.load_checkpoint(out.with_suffix(".checkpoint"))
    results["restored_weights"] = _stacked(restored.export_weights())
    results["restored_diverged_copies"] = np.array(_diverged_copies(restored), dtype=str)
    for backend in (two, restored):
        backend.close()

    one = _build(tf_backend.TensorFlowBackend, workload, model, 1)
    results["one_devices"] = np.array(one.devices_in_use())
    results["one_losses"] = np.array([one.train_step(batch) for batch in batches])
    results["one_weights"] = _stacked(one.export_weights())
    one.import_weights(trained)  # the two-replica run's weights: the same function, one device
    results["one_log_probs"] = one.predict(batches[0].inputs())
    one.close()

    # One LSTM layer: the quantized LSTM is a tf.scan whose trace takes seconds per layer, and one
    # layer already has a range of each kind (the features, an LSTM's input, the output layer's).
    quantized = model.model_copy(update={"precision": "int8-emulated", "lstm_layers": 1})
    for replicas in (REPLICAS, 1):
        backend = _build(tf_backend.TensorFlowBackend, workload, quantized, replicas)
        if replicas == 1:
            results["ranges_bound"] = _first_range_bounds(backend.export_weights(), quantized, batches[0])
        for batch in batches[:QUANTIZED_STEPS]:
            backend.train_step(batch)
        for layer, variable in backend.model.input_ranges.items():
            results[f"ranges/{replicas}/{layer}"] = np.array([copy.numpy() for copy in _copies(variable)])
        backend.close()

    results["dropout_masks"] = _dropout_masks_per_replica()
    results["three_devices_error"] = np.array(_three_devices_error(workload, model))
    np.savez(out, **results)


def _first_range_bounds(weights, model, batch) -> np.ndarray:
    """Relative rounding bound of each range after the first step, in layer order (conv, lstm.0, output)."""
    reference = bounded_reference(weights, model, batch.features, batch.feature_lengths, training=True)
    names = [f"{layer}.input_range" for layer in ("conv", "lstm.0", "output")]
    return np.array([reference.running_bound[name] / reference.running[name] for name in names])


def _build(backend_class, workload, model, replicas: int, seed: int = 0):
    backend = backend_class()
    plan = DevicePlan(kind="cpu", count=replicas, batch_per_device=GLOBAL_BATCH // replicas, threads=2)
    backend.build(BuildContext(model=model, optimizer=workload.optimizer, feature_dimension=workload.features.dimension,
                               plan=plan, seed=seed, max_frames=2000, max_label_length=400))
    return backend


def _stacked(weights: dict[str, np.ndarray]) -> np.ndarray:
    """Every weight in one flat vector, in the layout's order (both runs export the same layout)."""
    return np.concatenate([array.ravel() for array in weights.values()])


def _copies(variable) -> list:
    """A variable's per-replica copies (one for a single replica)."""
    value = variable.value
    return list(value.values) if hasattr(value, "values") else [value]


def _diverged_copies(backend) -> list[str]:
    """Paths of the model's variables (weights, BatchNorm statistics, seeds) whose replicas' copies differ."""
    diverged = []
    for variable in backend.model.variables:
        copies = [copy.numpy() for copy in _copies(variable)]
        if len(copies) != REPLICAS or any(not np.array_equal(copies[0], copy) for copy in copies[1:]):
            diverged.append(variable.path)
    return diverged


def _dropout_masks_per_replica() -> np.ndarray:
    """The mask each of two replicas draws from the same layer, call and seed state: (replicas, rows, units)."""
    from benchbase_tf_ds2.cross_replica import ReplicaDropout

    strategy = tf.distribute.MirroredStrategy([f"/cpu:{index}" for index in range(REPLICAS)])
    with strategy.scope():
        layer = ReplicaDropout(0.5, seed=3)
    masks = strategy.run(tf.function(lambda: layer(tf.ones([4, 64]), training=True) != 0))
    return np.stack([mask.numpy() for mask in strategy.experimental_local_results(masks)])


def _three_devices_error(workload, model) -> str:
    try:
        _build(tf_backend.TensorFlowBackend, workload, model, 3)
    except BenchbaseError as error:
        return str(error)
    return ""


# --- the tests ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_cpus(small_store, tmp_path_factory) -> dict[str, np.ndarray]:
    """What ``main`` saw; it trains for about 30 s on two cores, so the tests that read it are marked slow."""
    out = tmp_path_factory.mktemp("two-cpus") / "results.npz"
    finished = subprocess.run([sys.executable, __file__, str(small_store), str(out)], capture_output=True,
                              text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    with np.load(out, allow_pickle=False) as results:
        return dict(results)


@pytest.mark.slow
def test_a_two_device_cpu_plan_trains_on_two_logical_cpus(two_cpus):
    assert [device.rsplit("/", 1)[-1] for device in two_cpus["devices"]] == ["device:CPU:0", "device:CPU:1"]
    assert [device.rsplit("/", 1)[-1] for device in two_cpus["one_devices"]] == ["device:CPU:0"]


@pytest.mark.slow
def test_each_replica_receives_only_its_slice_of_the_global_batch(two_cpus):
    rows = GLOBAL_BATCH // REPLICAS
    # train_step returns after its step is complete, so the records come step by step.
    seen = two_cpus["slices_seen"].reshape(STEPS, REPLICAS, -1)
    for records, lengths in zip(seen, two_cpus["output_lengths"]):
        assert sorted(records[:, 0]) == list(range(REPLICAS))
        for replica, feature_rows, label_rows, *received in records.tolist():
            assert (feature_rows, label_rows) == (rows, rows)
            mine = lengths[replica * rows : (replica + 1) * rows].tolist()  # slice i for replica i
            assert received == mine + [-1] * (GLOBAL_BATCH - rows)


@pytest.mark.slow
def test_the_two_replica_step_is_traced_once_for_batches_of_every_shape(two_cpus):
    assert len(set(two_cpus["frames"])) > 1
    assert two_cpus["tracing_count"] == 1


@pytest.mark.slow
def test_two_replicas_follow_one_replicas_loss_curve(two_cpus):
    # The same seed, weights and batches, and no dropout: BatchNorm's statistics, the loss and
    # the gradient are the global batch's on both sides, so only the summation order differs.
    one, two = two_cpus["one_losses"], two_cpus["two_losses"]
    first = float(two_cpus["first_loss_bound"])
    relative = np.abs(two - one) / np.abs(one)
    assert relative[0] <= first, (relative[0], first)
    allowed = np.array([after_steps(first, step) for step in range(STEPS)])
    assert (relative <= allowed).all(), (relative, allowed)
    assert one[-1] < 0.8 * one[0]  # it trained, so the comparison covers real updates


@pytest.mark.slow
def test_two_replicas_fold_the_global_batchs_statistics_into_batchnorm(two_cpus):
    # After the first step, as the conformance kit's batchnorm_statistics rule: every running
    # mean and variance within its rounding bound of the reference's for the global batch, and
    # the batch statistic recovered from it too (100x as sensitive: the unbiased variance over
    # the batch's frames, or statistics per replica, fail here).
    assert float(two_cpus["statistics_excess"]) <= 0, float(two_cpus["statistics_excess"])


@pytest.mark.slow
def test_two_replicas_end_with_one_replicas_weights(two_cpus):
    initial, one, two = two_cpus["initial_weights"], two_cpus["one_weights"], two_cpus["two_weights"]
    drift = after_steps(float(two_cpus["first_loss_bound"]), STEPS - 1)
    assert np.linalg.norm(two - one) <= drift * np.linalg.norm(one - initial)


@pytest.mark.slow
def test_the_replicas_copies_of_every_variable_stay_identical(two_cpus):
    # BatchNorm's running statistics and dropout's seed state included: each replica updates
    # its own copy of them, so they stay equal only if every replica computes the same update.
    assert list(two_cpus["diverged_copies"]) == []


@pytest.mark.slow
def test_a_two_replica_model_predicts_and_restores_from_its_checkpoint(two_cpus):
    mask = two_cpus["valid_frames"]
    frames = mask.shape[1]
    difference = np.abs(two_cpus["two_log_probs"][:, :frames] - two_cpus["one_log_probs"][:, :frames])
    assert (difference <= two_cpus["log_probs_bound"])[mask].all(), difference[mask].max()
    assert np.array_equal(two_cpus["restored_weights"], two_cpus["two_weights"])
    assert list(two_cpus["restored_diverged_copies"]) == []


@pytest.mark.slow
def test_int8_emulated_ranges_are_the_global_batchs_on_every_replica(two_cpus):
    layers = sorted(key.rsplit("/", 1)[-1] for key in two_cpus if key.startswith("ranges/1/"))
    assert layers == ["conv", "lstm.0", "output"]
    for layer, first_bound in zip(["conv", "lstm.0", "output"], two_cpus["ranges_bound"]):
        copies, single = two_cpus[f"ranges/{REPLICAS}/{layer}"], two_cpus[f"ranges/1/{layer}"]
        assert len(copies) == REPLICAS and (copies == copies[0]).all(), layer
        allowed = after_steps(BOTH_SIDES * first_bound, QUANTIZED_STEPS - 1) * single[0]
        assert copies[0] > 0 and abs(copies[0] - single[0]) <= allowed + range_update_rounding(single[0]), layer
    # The features are the same numbers on both sides: the first range is equal, not just close.
    assert two_cpus[f"ranges/{REPLICAS}/conv"][0] == two_cpus["ranges/1/conv"][0]


@pytest.mark.slow
def test_each_replica_draws_its_own_dropout_mask(two_cpus):
    first, second = two_cpus["dropout_masks"]
    assert 0.3 < first.mean() < 0.7 and 0.3 < second.mean() < 0.7
    assert (first != second).mean() > 0.3  # independent masks disagree on about half the units


@pytest.mark.slow
def test_more_cpu_devices_than_the_process_already_fixed_are_refused(two_cpus):
    message = str(two_cpus["three_devices_error"])
    assert "already fixed this process's CPU devices at 2" in message and "\n" not in message


# --- in this process: nothing here needs more than one device -------------------------------


def test_visible_devices_counts_gpus_and_leaves_cpus_open():
    assert tf_backend.TensorFlowBackend.visible_devices("cpu") is None
    assert tf_backend.TensorFlowBackend.visible_devices("cuda") == len(tf.config.list_physical_devices("GPU"))


def test_a_worker_of_several_offers_its_one_cpu(monkeypatch):
    # Under torchrun a process is a MultiWorkerMirroredStrategy worker, which has one CPU replica:
    # a plan giving it more is refused before the clock (check_visible_devices).
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert tf_backend.TensorFlowBackend.visible_devices("cpu") == 1
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert tf_backend.TensorFlowBackend.visible_devices("cpu") is None


def test_a_cpu_worker_is_not_split_into_logical_devices():
    plan = DevicePlan(kind="cpu", count=4, batch_per_device=8, world_size=2, rank=0, devices_per_process=2,
                      peer_addresses=("127.0.0.1:1", "127.0.0.1:2"))
    with pytest.raises(BenchbaseError, match="one replica per CPU worker.*pass --devices 2 "):
        tf_backend._multi_worker_strategy(plan)


def test_a_lost_worker_is_named_by_the_collectives_own_status():
    # The message TensorFlow 2.21 raised on rank 0 when rank 1 was killed during a step.
    message = ("Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most recent call last):\n"
               "  File \"<frozen runpy>\", line 198, in _run_module_as_main\n\n"
               "Collective ops is aborted by: recvmsg:Connection reset by peer\n"
               "Additional GRPC error information from remote target /job:worker/replica:0/task:1\n"
               "\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_1234]")
    error = tf.errors.UnavailableError(None, None, message)
    assert tf_backend._status_line(error) == "Collective ops is aborted by: recvmsg:Connection reset by peer"


def test_the_profiler_writes_a_trace_into_the_directory(small_store, tmp_path):
    workload = builtin_workload("ds2-mini")
    backend = _build(tf_backend.TensorFlowBackend, workload, workload.model, 1)
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), GLOBAL_BATCH, model=workload.model,
                                    seed=0).epoch(0)))
    backend.train_step(batch)  # traced before the profiler starts, as after --profile's warm-up
    backend.start_profiler(tmp_path / "profile")
    backend.train_step(batch)
    backend.stop_profiler()
    backend.close()
    assert list((tmp_path / "profile").rglob("*.xplane.pb"))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
