"""The JAX backend's RNN-T family against benchbase's NumPy reference (benchbase.families.rnnt), on the
same weights, with tolerances from the error model (benchbase.numerics.tolerances); and its optimizer,
training, checkpoint and predict contract on a tiny model.

Every build compiles its programs (seconds on two cores), so the tests build few backends and
reuse one batch shape.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from benchbase.backend import Batch, BuildContext, DevicePlan, Inputs
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.families.rnnt import loss as reference_loss
from benchbase.families.rnnt import reference
from benchbase.families.rnnt.bounds import (
    bounded_transducer_loss,
    joint_bound,
    rounded_prediction,
    transducer_gradient_bound,
)
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.numerics.rounded import RoundedArithmetic
from benchbase.numerics.tolerances import (
    FLOAT32_UNIT_ROUNDOFF,
    FLOAT64_UNIT_ROUNDOFF,
    ctc_recursion_bounds,
    rounding_bound,
)
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs.optimizer import AdamWSpec

jax = pytest.importorskip("jax")
jax_backend = pytest.importorskip("benchbase_jax_ds2.backend")
jnp = jax.numpy

from benchbase_jax_ds2.arithmetic import arithmetic  # noqa: E402
from benchbase_jax_ds2.optimizers import make_optimizer, next_learning_rate  # noqa: E402
from benchbase_jax_ds2.rnnt import model as transducer  # noqa: E402
from benchbase_jax_ds2.rnnt.loss import transducer_losses  # noqa: E402
from benchbase_jax_ds2.rnnt.padding import transducer_cells  # noqa: E402
from benchbase_jax_ds2.threads import limit_cpu_threads  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

FEATURES = 13  # the small store's MFCCs
TINY = RNNTModelSpec(symbols=30, input_stack=3, input_subsample=3, encoder_pre_layers=1, stack_time_factor=2,
                     encoder_post_layers=2, encoder_units=12, prediction_embedding=8, prediction_layers=2,
                     prediction_units=10, joint_units=16, dropout=0.1)
NO_DROPOUT = TINY.model_copy(update={"dropout": 0.0})
ADAMW = AdamWSpec(learning_rate=3e-3, warmup_steps=3, hold_steps=2, decay_every_steps=4, decay_factor=0.5,
                  weight_decay=1e-3, gradient_clip_norm=5.0)
CPU = DevicePlan(kind="cpu", count=1, batch_per_device=8, threads=1)
"""Eight rows: the backend pads a batch of four with four rows of its own, which must count zero."""
FP32 = arithmetic(NO_DROPOUT)


def build(model=TINY, optimizer=ADAMW, seed=0, features=FEATURES):
    backend = jax_backend.JaxBackend()
    backend.build(BuildContext(model=model, optimizer=optimizer, feature_dimension=features, plan=CPU, seed=seed,
                               max_frames=600, max_label_length=100))
    return backend


def random_batch(seed=0, rows=4, frames=47, labels=6, model=TINY):
    """Random features and labels; the last row has too few frames for an encoder frame (an impossible alignment)."""
    rng = np.random.default_rng(seed)
    feature_lengths = np.array([frames, frames - 9, frames - 20, model.input_stack], dtype=np.int32)[:rows]
    label_lengths = np.array([labels, 2, labels - 1, 3], dtype=np.int32)[:rows]
    label_values = rng.integers(1, model.symbols, (rows, labels)).astype(np.int32)
    label_values[np.arange(labels) >= label_lengths[:, None]] = model.blank_index
    return Batch(features=rng.normal(size=(rows, frames, FEATURES)).astype(np.float32), feature_lengths=feature_lengths,
                 output_lengths=model.output_frames(feature_lengths), labels=label_values, label_lengths=label_lengths,
                 utterance_ids=tuple(f"u{i}" for i in range(rows)), transcripts=("",) * rows)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """JAX's client on the plan's one thread before the first test's JAX call creates it (the
    backend warns when it finds a client it did not limit)."""
    limit_cpu_threads(CPU.threads)


@pytest.fixture(scope="module")
def weights():
    return reference.random_weights(NO_DROPOUT, FEATURES, np.random.default_rng(3))


def jax_weights(weights):
    return {name: jnp.asarray(value) for name, value in weights.items()}


def encoded_and_predicted(weights, batch):
    """The JAX encoder projection f and prediction network output g of ``batch``, float32, in fp32."""
    parameters = jax_weights(weights)
    with jax.default_matmul_precision("highest"):
        encoded = transducer.encode(NO_DROPOUT, parameters, jnp.asarray(batch.features), FP32)
        predicted = transducer.predict_labels(NO_DROPOUT, parameters, jnp.asarray(batch.labels),
                                              jnp.asarray(batch.label_lengths), FP32)
    return encoded, predicted


def joint_lattice(weights, batch, encoded, predicted, cells):
    with jax.default_matmul_precision("highest"):
        return transducer.lattice(NO_DROPOUT, jax_weights(weights), encoded, predicted, jnp.asarray(batch.labels),
                                  jnp.asarray(batch.label_lengths), jnp.asarray(cells), FP32)


# --- the forward pass against the reference -----------------------------------------------------


def test_the_prediction_network_equals_the_reference(weights):
    batch = random_batch()
    predicted = np.asarray(encoded_and_predicted(weights, batch)[1], np.float64)
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    exact, bound = rounding_bound(lambda rounding: {"g": rounded_prediction(w, NO_DROPOUT, batch,
                                                                            RoundedArithmetic(rounding))})
    assert predicted.shape == (4, batch.labels.shape[1] + 1, NO_DROPOUT.prediction_units)
    assert np.allclose(exact["g"], reference.prediction_forward(weights, NO_DROPOUT, batch.labels, batch.label_lengths))
    assert np.all(np.abs(predicted - exact["g"]) <= bound["g"])


def test_the_joints_lattice_equals_the_reference_on_the_cells_within_the_lengths(weights):
    """On the network's own float32 f and g, so that only the joint's roundings are compared; the
    packed joint (training's) reads the same numbers as the joint on every cell."""
    batch = random_batch()
    encoded, predicted = encoded_and_predicted(weights, batch)
    f, g = np.asarray(encoded, np.float64), np.asarray(predicted, np.float64)
    log_probs = reference.joint(weights, NO_DROPOUT, f, g)
    expected = lattice_of(log_probs, batch)
    bound = joint_bound(weights, f, g).max(axis=-1)
    shape = log_probs.shape[:3]
    inside = ((np.arange(shape[1]) < batch.output_lengths[:, None])[:, :, None]
              & (np.arange(shape[2]) <= batch.label_lengths[:, None])[:, None, :])
    emits = inside & (np.arange(shape[2]) < batch.label_lengths[:, None])[:, None, :]
    packed = transducer_cells(batch.output_lengths, batch.label_lengths, shape)
    assert len(packed) < np.prod(shape)  # some capacity is saved, and the rest is unused capacity
    for cells in (transducer.every_cell(*shape), packed):
        found = joint_lattice(weights, batch, encoded, predicted, cells)
        for values, reference_values, read in ((found.blank, expected.blank, inside),
                                               (found.emit, expected.emit, emits)):
            difference = np.abs(np.asarray(values, np.float64) - reference_values)
            assert np.all(difference[read] <= bound[read])


def test_the_packed_cells_are_the_ones_within_the_lengths_in_quarters_of_the_lattice():
    cells = transducer_cells(np.array([3, 0, 2]), np.array([1, 4, 0]), (4, 3, 5))  # 60 cells
    assert cells.tolist() == [0, 1, 5, 6, 10, 11, 30, 35] + [60] * 7  # capacity: a quarter of 60
    full = transducer_cells(np.array([3, 3, 3, 3]), np.array([4, 4, 4, 4]), (4, 3, 5))
    assert full.tolist() == list(range(60))


# --- the loss and its gradient --------------------------------------------------------------------


def reference_lattice_arrays(weights, batch):
    encoded, _ = reference.encoder_forward(weights, NO_DROPOUT, batch.features, batch.feature_lengths)
    predicted = reference.prediction_forward(weights, NO_DROPOUT, batch.labels, batch.label_lengths)
    return reference.joint(weights, NO_DROPOUT, encoded, predicted)


def lattice_of(log_probs, batch):
    """The loss's two inputs read from full log-probabilities (NumPy's, or JAX's to differentiate), as
    ``model.lattice`` computes them."""
    following = np.where(np.arange(batch.labels.shape[1]) < batch.label_lengths[:, None], batch.labels, 0)
    following = np.pad(following, ((0, 0), (0, 1)))[:, None, :, None]
    take = np.take_along_axis if isinstance(log_probs, np.ndarray) else jnp.take_along_axis
    return transducer.Lattice(log_probs[..., 0], take(log_probs, following, axis=3)[..., 0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_loss_and_its_gradient_equal_the_reference(weights, dtype):
    """Per utterance, on the very same log-probabilities. float64 checks the algorithm to float64's
    roundoff; float32 is what training computes, within the recursion's rounding bound."""
    batch = random_batch()
    log_probs = reference_lattice_arrays(weights, batch)
    if dtype == np.float32:
        log_probs = log_probs.astype(np.float32).astype(np.float64)  # both sides read the same values
    arguments = (batch.labels, batch.output_lengths, batch.label_lengths, NO_DROPOUT.blank_index)
    expected = reference_loss.transducer_loss(log_probs, *arguments)
    expected_gradient = reference_loss.transducer_loss_gradient(log_probs, *arguments)
    lengths = (jnp.asarray(batch.output_lengths), jnp.asarray(batch.label_lengths))
    with jax.enable_x64(dtype == np.float64):
        def total(x):
            losses = transducer_losses(lattice_of(x, batch), *lengths)
            return losses.sum(), losses

        (_, losses), gradient = jax.value_and_grad(total, has_aux=True)(jnp.asarray(log_probs, dtype))
        losses, gradient = np.asarray(losses, np.float64), np.asarray(gradient, np.float64)
    assert batch.output_lengths[-1] == 0 and np.isinf(expected[-1])  # the impossible alignment
    assert losses[-1] == 0.0 and not gradient[-1].any()  # counts zero, with zero gradient
    unit_roundoff = FLOAT64_UNIT_ROUNDOFF if dtype == np.float64 else FLOAT32_UNIT_ROUNDOFF
    steps = batch.output_lengths + batch.label_lengths + 1  # the anti-diagonals, then the final blank
    bound = ctc_recursion_bounds(steps, expected, unit_roundoff)
    assert np.all(np.abs(losses - np.where(np.isinf(expected), 0.0, expected)) <= bound)
    assert np.all(np.abs(gradient - expected_gradient) <= transducer_gradient_bound(expected_gradient, expected, steps,
                                                                          unit_roundoff))
    assert np.abs(expected_gradient).max() > 0.1  # a gradient to compare, not zeros


def test_the_first_steps_loss_is_the_reference_mean_over_the_harness_batch(weights):
    """Four rows padded to the plan's eight: the four the backend adds count zero, and the mean
    divides by the harness's four; the impossible row counts zero too."""
    batch = random_batch()
    backend = build(NO_DROPOUT)
    try:
        backend.import_weights(weights)
        loss = backend.train_step(batch)
    finally:
        backend.close()
    expected = bounded_transducer_loss(weights, NO_DROPOUT, batch)
    assert isinstance(loss, float) and abs(loss - expected.loss) <= expected.bound


# --- weights, optimizer, the backend contract ----------------------------------------------------


def test_init_is_the_specs_and_the_seed_decides_it():
    """(The layout and the round trip of export and import are the kit's parameter_count and
    weight_round_trip rules.)"""
    first, again, other = (build(seed=seed) for seed in (0, 0, 1))
    try:
        initial = first.export_weights()
        assert all(np.array_equal(initial[name], value) for name, value in again.export_weights().items())
        assert not np.array_equal(initial["encoder.lstm.0.input_kernel"],
                                  other.export_weights()["encoder.lstm.0.input_kernel"])
        for name, value in initial.items():
            if value.ndim == 2:
                limit = np.sqrt(6.0 / sum(value.shape))  # Xavier-uniform over the layout's whole matrix
                assert np.abs(value).max() <= limit and np.abs(value).max() > 0.8 * limit, name
            elif ".lstm." in name:
                units = value.shape[0] // 4
                assert (value[units : 2 * units] == TINY.lstm_forget_bias).all()
                assert not np.delete(value, np.s_[units : 2 * units]).any()
            else:
                assert not value.any(), name
    finally:
        for backend in (first, again, other):
            backend.close()


def test_the_backend_declares_its_families_optimizers_and_rnnts_precisions():
    capabilities = jax_backend.JaxBackend.capabilities
    assert {"ds2", "rnnt"} <= capabilities.families and capabilities.optimizers == {"adadelta", "adamw"}
    assert capabilities.precisions_of("rnnt") == {"fp32", "tf32", "bf16", "fp16", "int8-emulated"}


def test_fp16_scales_its_loss_and_a_step_whose_gradients_overflow_changes_no_weight():
    """The harness refuses fp16 on a CPU (it measures nothing there); built directly, the step runs
    with float16 operands and the dynamic loss scale (``benchbase_jax_ds2.loss_scaling``)."""
    backend = build(TINY.model_copy(update={"precision": "fp16"}))
    try:
        batch = random_batch()
        assert float(backend._state.loss_scale["scale"]) == 2.0**15
        # A scale that overflows nothing on this tiny model, whatever the CPU's rounding.
        backend._state = backend._state._replace(loss_scale={"scale": jnp.float32(2.0**8),
                                                             "finite_steps": jnp.int32(0)})
        losses = [backend.train_step(batch) for _ in range(2)]
        state = backend._state
        assert all(np.isfinite(losses))
        assert float(state.loss_scale["scale"]) == 2.0**8 and int(state.loss_scale["finite_steps"]) == 2
        before = backend.export_weights()
        # 2**100 times the loss overflows float16's cotangents (65,504 at most): that step must move
        # nothing but the scale, halved, and its count of finite steps, back to 0.
        backend._state = state._replace(loss_scale={"scale": jnp.float32(2.0**100), "finite_steps": jnp.int32(5)})
        assert np.isfinite(backend.train_step(batch))  # the loss itself is unscaled
        after = backend.export_weights()
        assert [name for name in before if not np.array_equal(before[name], after[name])] == []
        assert float(backend._state.loss_scale["scale"]) == 2.0**99
        assert int(backend._state.loss_scale["finite_steps"]) == 0
        backend._state = backend._state._replace(loss_scale=state.loss_scale)
        backend.train_step(batch)
        assert [name for name in before if not np.array_equal(before[name], backend.export_weights()[name])]
    finally:
        backend.close()


def test_adamw_is_pytorchs_with_the_specs_schedule_counted_in_optimizer_steps():
    """optax's Adam, decoupled weight decay, the clip and the host's schedule against the formula
    in float64, over the warm-up, the hold and the decay."""
    optimizer = make_optimizer(ADAMW)
    rng = np.random.default_rng(0)
    parameters = {"w": rng.normal(size=5).astype(np.float32)}
    state = optimizer.init(parameters)
    expected, first, second = parameters["w"].astype(np.float64), np.zeros(5), np.zeros(5)
    for step in range(9):
        rate = next_learning_rate(ADAMW, state)
        assert rate == np.float32(ADAMW.learning_rate_at(step))
        gradient = rng.normal(size=5).astype(np.float32) * 3
        updates, state = optimizer.update({"w": gradient}, state, parameters, learning_rate=rate)
        parameters = {"w": np.asarray(parameters["w"] + updates["w"])}
        gradient = gradient * min(1.0, ADAMW.gradient_clip_norm / np.linalg.norm(gradient))
        first = ADAMW.beta1 * first + (1 - ADAMW.beta1) * gradient
        second = ADAMW.beta2 * second + (1 - ADAMW.beta2) * gradient**2
        adam = (first / (1 - ADAMW.beta1 ** (step + 1))) / (np.sqrt(second / (1 - ADAMW.beta2 ** (step + 1)))
                                                             + ADAMW.epsilon)
        expected = expected - ADAMW.learning_rate_at(step) * (adam + ADAMW.weight_decay * expected)
    # Each step moves a weight by about the learning rate (Adam's update is about 1): some twenty
    # roundings of it per step (moments, bias corrections, square root, quotient, decay), and of the
    # weight itself; 9 steps.
    allowed = 9 * 20 * FLOAT32_UNIT_ROUNDOFF * (np.abs(expected) + ADAMW.learning_rate)
    assert (np.abs(parameters["w"] - expected) <= allowed).all(), np.abs(parameters["w"] - expected) / allowed


def test_training_lowers_the_loss_and_the_same_seed_repeats_it(small_store):
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 4, model=TINY, seed=0).epoch(0)))
    assert (batch.output_lengths > 0).all()
    optimizer = AdamWSpec(learning_rate=0.02)
    first, again = build(optimizer=optimizer, features=batch.features.shape[2]), None
    try:
        losses = [first.train_step(batch) for _ in range(12)]
        again = build(optimizer=optimizer, features=batch.features.shape[2])
        assert [again.train_step(batch) for _ in range(3)] == losses[:3]  # same kernels, same dropout masks
        assert losses[-1] < 0.8 * losses[0]
    finally:
        first.close()
        if again is not None:
            again.close()


def test_predict_of_fewer_rows_than_the_plan_or_no_encoder_frame_keeps_its_shape():
    """(predict's outputs and that it changes no state are the kit's predict_shapes and forward_parity.)"""
    batch = random_batch(seed=2)
    backend = build()
    try:
        outputs = backend.predict(batch.inputs())
        short = Inputs(batch.features[:, :4], np.full(4, 4, np.int32), np.zeros(4, np.int32))  # no encoder frame
        assert backend.predict(short).shape == (4, 0, TINY.joint_units)
        smaller = dataclasses.replace(batch.inputs(), features=batch.features[:3],
                                      feature_lengths=batch.feature_lengths[:3],
                                      output_lengths=batch.output_lengths[:3])
        assert backend.predict(smaller).shape == (3, *outputs.shape[1:])
    finally:
        backend.close()


def test_the_dropout_is_inverted_at_the_specs_rate_in_training_only():
    spec = TINY.model_copy(update={"dropout": 0.2})
    ones = jnp.ones((1000, 1000))
    dropped = np.asarray(transducer._dropout(spec, ones, transducer.dropout_keys(spec, jax.random.key(0, impl="rbg"))))
    kept = (dropped != 0).mean()
    spread = 5 * np.sqrt(0.2 * 0.8 / ones.size)  # five binomial standard deviations
    assert abs(kept - 0.8) <= spread and np.all((dropped == 0) | (dropped == np.float32(1.25)))
    assert transducer._dropout(spec, ones, None) is ones


def test_ds2_trains_with_adamw_too():
    workload = builtin_workload("ds2-mini")
    backend = jax_backend.JaxBackend()
    backend.build(BuildContext(model=workload.model, optimizer=ADAMW, feature_dimension=FEATURES, plan=CPU, seed=0,
                               max_frames=600, max_label_length=100))
    try:
        rng = np.random.default_rng(0)
        lengths = np.array([60, 50], np.int32)
        batch = Batch(features=rng.normal(size=(2, 60, FEATURES)).astype(np.float32), feature_lengths=lengths,
                      output_lengths=workload.model.output_frames(lengths), labels=np.array([[3, 4], [5, 0]], np.int32),
                      label_lengths=np.array([2, 1], np.int32), utterance_ids=("a", "b"), transcripts=("", ""))
        assert np.isfinite(backend.train_step(batch))
        assert next_learning_rate(ADAMW, backend._state.optimizer) == np.float32(ADAMW.learning_rate_at(1))
    finally:
        backend.close()
