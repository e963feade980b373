"""The TensorFlow backend, and its parity with the PyTorch one: same model, same data, same settings."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_log_probs_agree, assert_losses_agree, assert_normalized, relative_loss_bound

from benchbase.backend import BuildContext, DevicePlan
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.harness.runner import run_benchmark
from benchbase.numerics.tolerances import same_kernels
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs import RunConfig

pytest.importorskip("tensorflow")
tf_backend = pytest.importorskip("benchbase_tf_ds2.backend")
torch_backend = pytest.importorskip("benchbase_torch_ds2.backend")

import tensorflow as tf  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

CPU = DevicePlan(kind="cpu", count=1, batch_per_device=8, threads=1)
MINI_MODEL = builtin_workload("ds2-mini").model


def build(backend_class, workload, seed=0):
    backend = backend_class()
    backend.build(context(workload, CPU, seed))
    return backend


def context(workload, plan, seed=0):
    return BuildContext(model=workload.model, optimizer=workload.optimizer,
                        feature_dimension=workload.features.dimension, plan=plan, seed=seed, max_frames=2000,
                        max_label_length=400)


def first_batch(store, size=8):
    return next(iter(BatchPipeline(FeatureStore(store), ("train",), size, model=MINI_MODEL, seed=0).epoch(0)))


# --- the same model -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ds2-mini", "ds2"])
def test_both_backends_build_models_with_the_parameter_count_the_spec_implies(registry, name):
    workload = registry.workload(name)
    expected = workload.model.parameter_count(workload.features.dimension)
    assert build(tf_backend.TensorFlowBackend, workload).parameter_count() == expected
    assert build(torch_backend.TorchBackend, workload).parameter_count() == expected


def test_the_specs_optimizer_values_reach_both_optimizers(registry):
    workload = registry.workload("ds2-mini")
    # Values that are neither framework's default, so a default cannot pass for the spec.
    optimizer = workload.optimizer.model_copy(update={"learning_rate": 0.5, "rho": 0.9, "epsilon": 1e-6})
    workload = workload.model_copy(update={"optimizer": optimizer})
    keras_optimizer = build(tf_backend.TensorFlowBackend, workload).optimizer
    assert keras_optimizer.learning_rate.numpy() == 0.5
    assert (keras_optimizer.rho, keras_optimizer.epsilon) == (0.9, 1e-6)
    group = build(torch_backend.TorchBackend, workload).optimizer.param_groups[0]
    assert (group["lr"], group["rho"], group["eps"]) == (0.5, 0.9, 1e-6)


def test_the_specs_model_values_reach_the_keras_layers(registry):
    spec = registry.workload("ds2-mini").model.model_copy(
        update={"batchnorm_momentum": 0.9, "batchnorm_epsilon": 1e-3, "lstm_forget_bias": 2.0}
    )
    workload = registry.workload("ds2-mini").model_copy(update={"model": spec})
    model = build(tf_backend.TensorFlowBackend, workload).model
    for norm in [model.conv_norm, *model.lstm_norms]:
        assert (norm.momentum, norm.epsilon) == (0.9, 1e-3)
    conv = model.conv
    assert (conv.kernel_size, conv.strides, conv.padding, conv.use_bias) == ((11,), (2,), "valid", False)
    bias = model.lstms[0].cell.bias.numpy()
    units = spec.lstm_units
    assert (bias[units : 2 * units] == 2.0).all() and (bias[:units] == 0).all() and (bias[2 * units :] == 0).all()
    assert model.dropout.rate == spec.dropout


def test_the_lstms_stay_eligible_for_cudnn(registry):
    model = build(tf_backend.TensorFlowBackend, registry.workload("ds2-mini")).model
    for lstm in model.lstms:
        cell = lstm.cell
        assert cell.activation.__name__ == "tanh" and cell.recurrent_activation.__name__ == "sigmoid"
        assert (lstm.unroll, cell.recurrent_dropout, cell.use_bias, lstm.use_cudnn) == (False, 0, True, "auto")


def test_with_the_same_weights_both_backends_compute_the_same_log_probs(registry, small_store):
    workload = registry.workload("ds2-mini")
    batch = first_batch(small_store)
    torch_side = build(torch_backend.TorchBackend, workload)
    tf_side = build(tf_backend.TensorFlowBackend, workload, seed=5)
    torch_side.train_step(batch)  # moves the BatchNorm statistics off their initial values
    weights = torch_side.export_weights()
    tf_side.import_weights(weights)
    torch_log_probs = torch_side.predict(batch.inputs())
    tf_log_probs = tf_side.predict(batch.inputs())
    assert_log_probs_agree(tf_log_probs, torch_log_probs, weights, workload.model, batch.inputs())



def test_from_the_same_weights_both_backends_follow_the_same_loss_curve(registry, small_store):
    # Without dropout nothing random is left: the same model, optimizer and batches must give
    # the same losses step after step (float32 round-off aside).
    workload = registry.workload("ds2-mini")
    workload = workload.model_copy(update={"model": workload.model.model_copy(update={"dropout": 0.0})})
    batches = list(BatchPipeline(FeatureStore(small_store), ("train",), 8, model=MINI_MODEL, seed=0).epoch(0))[:6]
    torch_side = build(torch_backend.TorchBackend, workload)
    tf_side = build(tf_backend.TensorFlowBackend, workload, seed=5)
    weights = torch_side.export_weights()
    tf_side.import_weights(weights)
    losses = [(tf_side.train_step(batch), torch_side.train_step(batch)) for batch in batches]
    assert_losses_agree(*zip(*losses), relative_loss_bound(weights, workload.model, batches[0]))


def test_the_fused_cpu_lstm_matches_keras_lstm_with_its_gradients(registry, small_store):
    workload = registry.workload("ds2-mini")
    batch = first_batch(small_store)
    fused = tf_backend.TensorFlowBackend(fused_lstm=True)
    plain = tf_backend.TensorFlowBackend(fused_lstm=False)
    for backend in (fused, plain):
        backend.build(context(workload, CPU))
    weights = fused.export_weights()
    losses = [(fused.train_step(batch), plain.train_step(batch)) for _ in range(3)]
    assert_losses_agree(*zip(*losses), relative_loss_bound(weights, workload.model, batch))
    assert_log_probs_agree(fused.predict(batch.inputs()), plain.predict(batch.inputs()), fused.export_weights(),
                           workload.model, batch.inputs(), steps=3)


# --- the same data ------------------------------------------------------------------------


@pytest.mark.slow  # two runs of two epochs through the harness
def test_for_the_same_seed_the_harness_feeds_both_backends_the_same_batches(registry, pm, small_store, tmp_path):
    workload = registry.workload("ds2-mini").model_copy(update={"max_epochs": 2})
    seen = {}
    for backend_class in (tf_backend.TensorFlowBackend, torch_backend.TorchBackend):
        recorder = _recording(backend_class)
        config = RunConfig(workload=workload, backend=backend_class.name, hardware=registry.profile("cpu"), seed=4,
                           out=tmp_path / backend_class.name, data=small_store)
        run_benchmark(config, pm, recorder)
        seen[backend_class.name] = recorder.batches
    assert len(seen["tf"]) >= 2 * 3 and seen["tf"] == seen["torch"]
    assert len(set(seen["tf"])) > 1


def _recording(backend_class):
    class Recording(backend_class):
        batches: list[tuple[str, ...]] = []

        def train_step(self, batch):
            Recording.batches.append(batch.utterance_ids)
            return super().train_step(batch)

    return Recording


# --- training, checkpoints, compilation and devices ---------------------------------------


def test_training_lowers_the_loss_and_a_checkpoint_restores_predictions(registry, small_store, tmp_path):
    workload = registry.workload("ds2-mini")
    batch = first_batch(small_store)
    backend = build(tf_backend.TensorFlowBackend, workload)
    losses = [backend.train_step(batch) for _ in range(12)]
    assert losses[-1] < 0.8 * losses[0]
    log_probs = backend.predict(batch.inputs())
    assert log_probs.shape == (8, workload.model.output_frames(batch.features.shape[1]), 30)
    assert_normalized(log_probs)
    backend.save_checkpoint(tmp_path / "ckpt")
    assert [path.name for path in tmp_path.iterdir()] == ["ckpt"]
    restored = build(tf_backend.TensorFlowBackend, workload, seed=99)
    restored.load_checkpoint(tmp_path / "ckpt")
    assert np.abs(restored.predict(batch.inputs()) - log_probs).max() <= same_kernels(log_probs)
    # The optimizer's state came back too: the next step is the one the original would take.
    expected = backend.train_step(batch)
    assert abs(restored.train_step(batch) - expected) <= same_kernels(expected)


def test_the_training_step_is_traced_once_for_batches_of_every_shape(registry, small_store):
    backend = build(tf_backend.TensorFlowBackend, registry.workload("ds2-mini"))
    batches = list(BatchPipeline(FeatureStore(small_store), ("train",), 8, model=MINI_MODEL, seed=0).epoch(0))[:4]
    assert len({batch.features.shape[1] for batch in batches}) > 1
    for batch in batches:
        backend.train_step(batch)
    assert backend._train_function.experimental_get_tracing_count() == 1
    for batch in batches:
        backend.predict(batch.inputs())
    assert backend._predict_function.experimental_get_tracing_count() == 1


def test_training_runs_through_a_mirrored_strategy_with_one_cpu_replica(registry, small_store):
    backend = build(tf_backend.TensorFlowBackend, registry.workload("ds2-mini"))
    assert isinstance(backend.strategy, tf.distribute.MirroredStrategy)
    assert backend.strategy.num_replicas_in_sync == 1
    assert np.isfinite(backend.train_step(first_batch(small_store)))
    assert "MirroredStrategy" in backend.device_description()
    # Several replicas (two logical CPUs, in a fresh interpreter): test_tf_distributed.py beside this file.


def test_gradient_clipping_takes_the_specs_norm(registry, small_store):
    workload = registry.workload("ds2-mini")
    clipped = workload.model_copy(
        update={"optimizer": workload.optimizer.model_copy(update={"gradient_clip_norm": 1e-3})}
    )
    batch = first_batch(small_store)
    free, tight = build(tf_backend.TensorFlowBackend, workload), build(tf_backend.TensorFlowBackend, clipped)
    before = free.predict(batch.inputs())
    free.train_step(batch)
    tight.train_step(batch)
    # AdaDelta's first step scales with the gradient, so a tight clip barely moves the model.
    assert np.abs(tight.predict(batch.inputs()) - before).max() < np.abs(free.predict(batch.inputs()) - before).max()


def test_a_gpu_profile_without_a_gpu_says_so(registry):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    from benchbase.errors import BenchbaseError

    workload = registry.workload("ds2-mini")
    with pytest.raises(BenchbaseError, match="sees no GPU; pass --device cpu"):
        tf_backend.TensorFlowBackend().build(context(workload, DevicePlan(kind="cuda", count=1, batch_per_device=8)))


@pytest.mark.gpu
def test_gpu_training_step(registry, small_store):
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU")
    workload = registry.workload("ds2-mini")
    backend = tf_backend.TensorFlowBackend()
    backend.build(context(workload, DevicePlan(kind="cuda", count=1, batch_per_device=8)))
    assert np.isfinite(backend.train_step(first_batch(small_store)))

