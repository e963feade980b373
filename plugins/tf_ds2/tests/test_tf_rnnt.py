"""The TensorFlow backend's RNN-T family against benchbase's NumPy reference (benchbase.families.rnnt), on the
same weights, with tolerances from the error model (benchbase.numerics.tolerances); and its training, optimizer,
checkpoint and predict contract on a tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchbase.backend import Batch, BuildContext, DevicePlan, Inputs
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.errors import BenchbaseError
from benchbase.families.rnnt import loss as reference_loss
from benchbase.families.rnnt import reference
from benchbase.families.rnnt.bounds import (
    bounded_transducer_loss,
    joint_bound,
    rounded_prediction,
    transducer_gradient_bound,
)
from benchbase.families.rnnt.parts import PARTS
from benchbase.families.rnnt.quantization import Quantizer, input_range_names
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import validate_weights
from benchbase.numerics.rounded import RoundedArithmetic
from benchbase.numerics.tolerances import (
    BOTH_SIDES,
    FLOAT32_UNIT_ROUNDOFF,
    FLOAT64_UNIT_ROUNDOFF,
    INJECTION_DRAWS,
    after_steps,
    ctc_recursion_bounds,
    rounding_bound,
)
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs.optimizer import AdamWSpec

pytest.importorskip("tensorflow")
tf_backend = pytest.importorskip("benchbase_tf_ds2.backend")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from benchbase_tf_ds2.optimizers import SpecAdamW  # noqa: E402
from benchbase_tf_ds2.rnnt import FAMILY as RNNT  # noqa: E402
from benchbase_tf_ds2.rnnt.loss import lattice_losses, mean_over_batch, transducer_lattice, transducer_losses  # noqa: E402
from benchbase_tf_ds2.rnnt.model import RNNTransducer  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

FEATURES = 13  # the small store's MFCCs
TINY = RNNTModelSpec(symbols=30, input_stack=3, input_subsample=3, encoder_pre_layers=1, stack_time_factor=2,
                     encoder_post_layers=2, encoder_units=12, prediction_embedding=8, prediction_layers=2,
                     prediction_units=10, joint_units=16, dropout=0.1)
NO_DROPOUT = TINY.model_copy(update={"dropout": 0.0})
ADAMW = AdamWSpec(learning_rate=3e-3, warmup_steps=3, hold_steps=2, decay_every_steps=4, decay_factor=0.5,
                  weight_decay=1e-3, gradient_clip_norm=5.0)
CPU = DevicePlan(kind="cpu", count=1, batch_per_device=4, threads=1)


def build(model=TINY, optimizer=ADAMW, seed=0, features=FEATURES):
    backend = tf_backend.TensorFlowBackend()
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


def network_on(weights, model=NO_DROPOUT, fused=False):
    network = RNNTransducer(model, FEATURES, fused_lstm=fused)
    network.build_weights()
    validate_weights(weights, model, FEATURES)
    for name, variable in RNNT.neutral_variables(network).items():
        variable.assign(np.asarray(weights[name], dtype=np.float32))
    return network


def exported_weights(network):
    """The network's weights by their neutral names, as the backend's export_weights() reads them."""
    return {name: np.array(variable.numpy(), dtype=np.float32)
            for name, variable in RNNT.neutral_variables(network).items()}


def forward(network, batch):
    """(f, g) of the network, eager."""
    encoded = network.encode(tf.constant(batch.features))
    predicted = network.predict_net(tf.constant(batch.labels), tf.constant(batch.label_lengths))
    return encoded, predicted


@pytest.fixture(scope="module")
def weights():
    return reference.random_weights(NO_DROPOUT, FEATURES, np.random.default_rng(3))


# --- the forward pass, the loss and its gradient against the reference -------------------------


@pytest.mark.parametrize("fused", [True], ids=["fused-lstm"])  # Keras's LSTM: the kit's forward_parity rule
def test_the_encoder_projection_equals_the_reference_within_its_rounding_bound(weights, fused):
    batch = random_batch()
    encoded = network_on(weights, fused=fused).encode(tf.constant(batch.features)).numpy().astype(np.float64)
    exact, bound = PARTS.bounded_outputs(weights, NO_DROPOUT, batch.features, batch.feature_lengths,
                                         operand_roundoff=0.0, draws=INJECTION_DRAWS)
    assert encoded.shape == exact.shape == (4, NO_DROPOUT.output_frames(47), NO_DROPOUT.joint_units)
    assert np.all(np.abs(encoded - exact) <= bound)


def test_the_prediction_network_equals_the_reference(weights):
    batch = random_batch()
    _, predicted = forward(network_on(weights), batch)
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    exact, bound = rounding_bound(
        lambda rounding: {"g": rounded_prediction(w, NO_DROPOUT, batch, RoundedArithmetic(rounding))})
    assert predicted.shape == (4, batch.labels.shape[1] + 1, NO_DROPOUT.prediction_units)
    assert np.allclose(exact["g"], reference.prediction_forward(weights, NO_DROPOUT, batch.labels, batch.label_lengths))
    assert np.all(np.abs(predicted.numpy() - exact["g"]) <= bound["g"])


def test_the_joint_log_probabilities_equal_the_reference_within_their_rounding_bound(weights):
    """On the network's own float32 f and g, so that only the joint's roundings are compared."""
    batch = random_batch()
    network = network_on(weights)
    encoded, predicted = forward(network, batch)
    log_probs = network.joint(encoded, predicted).numpy().astype(np.float64)
    f, g = encoded.numpy().astype(np.float64), predicted.numpy().astype(np.float64)
    exact = reference.joint(weights, NO_DROPOUT, f, g)
    assert np.all(np.abs(log_probs - exact) <= joint_bound(weights, f, g))


def test_training_computes_the_joint_on_the_cells_within_the_lengths_only(weights):
    """``lattice`` (training's packed joint) reads what the loss reads of the full ``joint``."""
    batch = random_batch()
    network = network_on(weights)
    encoded, predicted = forward(network, batch)
    packed = network.lattice(encoded, predicted, tf.constant(batch.labels), tf.constant(batch.output_lengths),
                             tf.constant(batch.label_lengths))
    full = transducer_lattice(network.joint(encoded, predicted), batch.labels, batch.label_lengths, 0)
    bound = joint_bound(weights, encoded.numpy().astype(np.float64), predicted.numpy().astype(np.float64))
    inside = ((np.arange(packed[0].shape[1]) < batch.output_lengths[:, None])[:, :, None]
              & (np.arange(packed[0].shape[2]) <= batch.label_lengths[:, None])[:, None, :])
    emits = inside & (np.arange(packed[0].shape[2]) < batch.label_lengths[:, None])[:, None, :]
    for found, expected, cells in zip(packed, full, (inside, emits)):
        found, expected = found.numpy().astype(np.float64), expected.numpy().astype(np.float64)
        assert np.isneginf(found[~cells]).all() and np.isfinite(found[cells]).all()
        assert np.all(np.abs(found[cells] - expected[cells]) <= 2 * bound.max(axis=-1)[cells])  # two float32 sides


def test_the_packed_joint_gives_the_full_joints_gradients(weights):
    """Every variable's gradient through training's packed lattice equals that through the full
    joint, in float64: any order of the same float64 sums agrees far within float32's unit roundoff
    of the gradient's magnitude, which a wrong or missing cell exceeds."""
    batch = random_batch()
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    try:
        network = network_on(weights)  # Keras's LSTM (BlockLSTM has no float64 kernel)
    finally:
        keras.config.set_dtype_policy(policy)
    labels, label_lengths = tf.constant(batch.labels), tf.constant(batch.label_lengths)
    output_lengths, features = tf.constant(batch.output_lengths), tf.constant(batch.features, tf.float64)
    variables = network.trainable_variables

    with tf.GradientTape(persistent=True) as tape:
        packed = mean_over_batch(lattice_losses(*network.lattice_of(features, labels, output_lengths, label_lengths),
                                                output_lengths, label_lengths))
        log_probs = network.joint(network.encode(features), network.predict_net(labels, label_lengths))
        full = mean_over_batch(transducer_losses(log_probs, labels, output_lengths, label_lengths, 0))
    assert packed.dtype == tf.float64 and abs(packed.numpy() - full.numpy()) <= 1e-12 * abs(full.numpy())
    for variable, through_packed, through_full in zip(variables, tape.gradient(packed, variables),
                                                      tape.gradient(full, variables)):
        difference = np.abs(through_packed.numpy() - through_full.numpy()).max()
        assert difference <= FLOAT32_UNIT_ROUNDOFF * np.abs(through_full.numpy()).max(), variable.path
        assert np.abs(through_full.numpy()).max() > 0, variable.path


@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
def test_the_loss_and_its_gradient_equal_the_reference(weights, dtype):
    """Per utterance, on the very same log-probabilities. float64 checks the algorithm to float64's
    roundoff; float32 is what training computes, within the recursion's rounding bound."""
    batch = random_batch()
    encoded, _ = reference.encoder_forward(weights, NO_DROPOUT, batch.features, batch.feature_lengths)
    predicted = reference.prediction_forward(weights, NO_DROPOUT, batch.labels, batch.label_lengths)
    log_probs = reference.joint(weights, NO_DROPOUT, encoded, predicted)
    if dtype == tf.float32:
        log_probs = log_probs.astype(np.float32).astype(np.float64)  # both sides read the same values
    arguments = (batch.labels, batch.output_lengths, batch.label_lengths, NO_DROPOUT.blank_index)
    expected = reference_loss.transducer_loss(log_probs, *arguments)
    expected_gradient = reference_loss.transducer_loss_gradient(log_probs, *arguments)
    leaf = tf.constant(log_probs, dtype)
    with tf.GradientTape() as tape:
        tape.watch(leaf)
        losses = transducer_losses(leaf, *arguments)
    gradient = tape.gradient(losses, leaf).numpy().astype(np.float64)  # of the losses' sum
    losses = losses.numpy().astype(np.float64)
    assert batch.output_lengths[-1] == 0 and np.isinf(expected[-1])  # the impossible alignment
    assert losses[-1] == 0.0 and not gradient[-1].any()  # counts zero, with zero gradient
    unit_roundoff = FLOAT64_UNIT_ROUNDOFF if dtype == tf.float64 else FLOAT32_UNIT_ROUNDOFF
    steps = batch.output_lengths + batch.label_lengths + 1  # the anti-diagonals, then the final blank
    bound = ctc_recursion_bounds(steps, expected, unit_roundoff)
    assert np.all(np.abs(losses - np.where(np.isinf(expected), 0.0, expected)) <= bound)
    assert np.all(np.abs(gradient - expected_gradient) <= transducer_gradient_bound(expected_gradient, expected, steps,
                                                                          unit_roundoff))
    assert np.abs(expected_gradient).max() > 0.1  # a gradient to compare, not zeros


def test_the_loss_gradient_against_finite_differences():
    """The custom backward against TensorFlow's numerical differentiation, in float64, through a log-softmax."""
    rng = np.random.default_rng(5)
    logits = tf.constant(rng.normal(size=(2, 4, 3, 5)))
    labels, output_lengths, label_lengths = np.array([[1, 3], [2, 0]]), np.array([4, 2]), np.array([2, 1])

    def loss(x):
        return transducer_losses(tf.nn.log_softmax(x, axis=-1), labels, output_lengths, label_lengths, 0)

    theoretical, numerical = tf.test.compute_gradient(loss, [logits])
    assert np.abs(theoretical[0] - numerical[0]).max() <= 1e-6 * max(np.abs(numerical[0]).max(), 1.0)


INT8 = NO_DROPOUT.model_copy(update={"precision": "int8-emulated"})


def reference_ranges(weights, features, feature_lengths, labels, label_lengths, within_lengths=True):
    """The ranges the reference's int8 training pass leaves."""
    quantizer = Quantizer(weights, INT8, training=True)
    encoded, output_lengths = reference.encoder_forward(weights, INT8, features, feature_lengths, quantizer)
    predicted = reference.prediction_forward(weights, INT8, labels, label_lengths, quantizer)
    reference.joint(weights, INT8, encoded, predicted, quantizer,
                    (output_lengths, label_lengths) if within_lengths else None)
    return quantizer.ranges


@pytest.mark.parametrize("case", ["padded", "no encoder frame", "no labels"])
def test_int8_ranges_count_the_lattice_cells_within_the_lengths_and_none_of_the_backends_padding(case):
    """joint.output's range is over the packed joint's cells; the frames or the label column that
    ``lattice_of`` pads a degenerate batch with count in no range (the reference never sees them).
    From zero ranges, so each range is its input's max|x|; the padding frames are large, so that
    a range counting them would show. Tolerance: a grid step flipped upstream (1/127 of a range)."""
    weights = reference.random_weights(INT8, FEATURES, np.random.default_rng(3))
    weights |= {name: np.float32(0) for name in input_range_names(INT8)}
    batch = random_batch(seed=5)
    features, feature_lengths, labels, label_lengths = (batch.features.copy(), batch.feature_lengths, batch.labels,
                                                        batch.label_lengths)
    features[np.arange(features.shape[1])[None, :] >= feature_lengths[:, None]] = 8.0
    if case == "no encoder frame":  # one input window (INT8.input_frames_for(1) is 6), no encoder frame
        features, feature_lengths = features[:, :5], np.full(4, 5, np.int32)
    elif case == "no labels":
        labels, label_lengths = labels[:, :0], np.zeros(4, np.int32)
    network = network_on(weights, model=INT8)
    network.lattice_of(tf.constant(features), tf.constant(labels), tf.constant(INT8.output_frames(feature_lengths)),
                       tf.constant(label_lengths), training=True)
    found = exported_weights(network)
    expected = reference_ranges(weights, features, feature_lengths, labels, label_lengths)
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, rel=1e-2), name
    # The batch tells the ranges apart from those of a backend that counted every cell or its padding.
    if case == "padded":
        wrong = reference_ranges(weights, features, feature_lengths, labels, label_lengths, within_lengths=False)
        name = "joint.output.input_range"
    elif case == "no encoder frame":
        wrong = reference_ranges(weights, np.pad(features, ((0, 0), (0, 1), (0, 0))), np.full(4, 6, np.int32), labels,
                                 label_lengths)
        name = "joint.encoder.input_range"
    else:
        wrong = reference_ranges(weights, features, feature_lengths, np.zeros((4, 1), np.int32), label_lengths)
        name = "joint.prediction.input_range"
    assert abs(wrong[name] - expected[name]) > 0.03 * max(wrong[name], expected[name]), (name, wrong[name])


# --- weights: init, the neutral layout ----------------------------------------------------------


def test_init_is_the_specs_and_the_seed_decides_it():
    first, again, other = (build(seed=seed).export_weights() for seed in (0, 0, 1))
    assert all(np.array_equal(first[name], again[name]) for name in first)
    assert not np.array_equal(first["encoder.lstm.0.input_kernel"], other["encoder.lstm.0.input_kernel"])
    for name, value in first.items():
        if value.ndim == 2:
            limit = np.sqrt(6.0 / sum(value.shape))  # Xavier-uniform over the layout's whole matrix
            assert np.abs(value).max() <= limit and np.abs(value).max() > 0.8 * limit, name
        elif ".lstm." in name:
            units = value.shape[0] // 4
            assert (value[units : 2 * units] == TINY.lstm_forget_bias).all()
            assert not np.delete(value, np.s_[units : 2 * units]).any()
        else:
            assert not value.any(), name
    assert build().parameter_count() == TINY.parameter_count(FEATURES)


# --- the backend contract ------------------------------------------------------------------------


def test_the_backend_declares_both_families_both_optimizers_and_rnnts_precisions():
    capabilities = tf_backend.TensorFlowBackend.capabilities
    assert {"ds2", "rnnt"} <= capabilities.families and {"adadelta", "adamw"} <= capabilities.optimizers
    assert capabilities.precisions_of("rnnt") == {"fp32", "tf32", "bf16", "fp16", "int8-emulated"}
    assert "int8-emulated" in capabilities.precisions_of("ds2")


def test_adamw_settings_and_the_schedule_reach_the_framework():
    backend = build()
    optimizer = backend.optimizer
    assert isinstance(optimizer, SpecAdamW)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon, optimizer.weight_decay) == (0.9, 0.999, 1e-8, 1e-3)
    batch = random_batch()
    for step in range(7):
        backend.train_step(batch)
        assert optimizer.learning_rate.numpy() == np.float32(ADAMW.learning_rate_at(step))
        assert int(optimizer.iterations.numpy()) == step + 1


def test_adamw_adds_epsilon_to_the_root_of_the_bias_corrected_second_moment():
    """Two steps of SpecAdamW against PyTorch's and optax's AdamW written out in float64; Keras's
    own AdamW ("epsilon hat") misses the first step by far more at a gradient this small."""
    spec = AdamWSpec(learning_rate=0.1, epsilon=1e-3, weight_decay=0.5)
    start, gradients = np.array([1.0, -2.0, 0.5]), [np.array([1e-4, -3e-4, 2e-3]), np.array([2e-4, 1e-4, -1e-3])]
    variable = tf.Variable(start.astype(np.float32))
    optimizer = SpecAdamW(learning_rate=spec.learning_rate, beta_1=spec.beta1, beta_2=spec.beta2,
                          epsilon=spec.epsilon, weight_decay=spec.weight_decay)
    expected, first, second = start.copy(), np.zeros(3), np.zeros(3)
    for step, gradient in enumerate(gradients, start=1):
        optimizer.apply([tf.constant(gradient, tf.float32)], [variable])
        expected *= 1 - spec.learning_rate * spec.weight_decay
        first = spec.beta1 * first + (1 - spec.beta1) * gradient
        second = spec.beta2 * second + (1 - spec.beta2) * gradient**2
        denominator = np.sqrt(second / (1 - spec.beta2**step)) + spec.epsilon
        expected -= spec.learning_rate / (1 - spec.beta1**step) * first / denominator
        assert np.abs(variable.numpy() - expected).max() <= 1e-6 * np.abs(expected).max()


def test_ds2_trains_with_adamw_too(small_store):
    workload = builtin_workload("ds2-mini")
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 4, model=workload.model, seed=0).epoch(0)))
    backend = build(workload.model, features=batch.features.shape[2])
    assert isinstance(backend.optimizer, SpecAdamW)
    assert np.isfinite(backend.train_step(batch))
    assert backend.optimizer.learning_rate.numpy() == np.float32(ADAMW.learning_rate_at(0))


def test_same_seed_same_first_losses_and_training_lowers_the_loss(small_store):
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 4, model=TINY, seed=0).epoch(0)))
    features = batch.features.shape[2]
    assert (batch.output_lengths > 0).all()
    optimizer = AdamWSpec(learning_rate=0.02)
    first = build(optimizer=optimizer, features=features)
    losses = [first.train_step(batch) for _ in range(12)]
    again = build(optimizer=optimizer, features=features)  # build() seeds Keras's generators, dropout's too
    assert [again.train_step(batch) for _ in range(3)] == losses[:3]  # same kernels, same dropout masks
    assert losses[-1] < 0.8 * losses[0]


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    """(That one continues training exactly is the kit's checkpoint_round_trip rule.)"""
    build().save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(BenchbaseError, match="do not fit this model"):
        build(TINY.model_copy(update={"joint_units": 8})).load_checkpoint(tmp_path / "ckpt")


def test_predict_of_utterances_without_an_encoder_frame_returns_no_frames():
    """(predict's outputs and that it changes no state are the kit's predict_shapes and forward_parity.)"""
    batch, backend = random_batch(seed=2), build()
    short = Inputs(batch.features[:, :4], np.full(4, 4, np.int32), np.zeros(4, np.int32))  # no encoder frame
    assert backend.predict(short).shape == (4, 0, TINY.joint_units)


def test_a_batch_without_an_encoder_frame_trains_with_zero_loss():
    """Every utterance impossible: loss 0, and only the decoupled weight decay moves the weights."""
    batch = random_batch(seed=3)
    short = Batch(features=batch.features[:, :4], feature_lengths=np.full(4, 4, np.int32),
                  output_lengths=np.zeros(4, np.int32), labels=batch.labels, label_lengths=batch.label_lengths,
                  utterance_ids=batch.utterance_ids, transcripts=batch.transcripts)
    backend = build(NO_DROPOUT, optimizer=ADAMW.model_copy(update={"weight_decay": 0.0}))
    before = backend.export_weights()
    assert backend.train_step(short) == 0.0
    assert all(np.array_equal(before[name], value) for name, value in backend.export_weights().items())


def test_the_training_step_is_traced_once_for_batches_of_every_shape():
    backend = build()
    batches = [random_batch(seed=seed, frames=frames, labels=labels)
               for seed, frames, labels in ((0, 47, 6), (1, 60, 9), (2, 33, 4))]
    for batch in batches:
        backend.train_step(batch)
        backend.predict(batch.inputs())
    assert backend._train_function.experimental_get_tracing_count() == 1
    assert backend._predict_function.experimental_get_tracing_count() == 1


def test_the_dropout_is_inverted_dropout_at_the_specs_rate_in_training_only():
    network = RNNTransducer(TINY.model_copy(update={"dropout": 0.2}), FEATURES, fused_lstm=True)
    ones = tf.ones([1000, 1000])
    dropped = network.dropout(ones, training=True).numpy()
    kept = (dropped != 0).mean()
    spread = 5 * np.sqrt(0.2 * 0.8 / ones.shape.num_elements())  # five binomial standard deviations
    assert abs(kept - 0.8) <= spread and np.all((dropped == 0) | np.isclose(dropped, 1.25))
    assert np.array_equal(network.dropout(ones, training=False).numpy(), ones.numpy())


def test_the_lstms_are_keras_own_and_stay_eligible_for_cudnn():
    model = build().model
    for lstm in (*model.encoder, *model.prediction):
        cell = lstm.cell
        assert not lstm.fused  # Keras's loop on a CPU: faster than BlockLSTMV2 at the family's widths
        assert cell.activation.__name__ == "tanh" and cell.recurrent_activation.__name__ == "sigmoid"
        assert (lstm.unroll, cell.recurrent_dropout, cell.use_bias, lstm.use_cudnn) == (False, 0, True, "auto")
    fused = tf_backend.TensorFlowBackend(fused_lstm=True)
    fused.build(BuildContext(model=TINY, optimizer=ADAMW, feature_dimension=FEATURES, plan=CPU, seed=0,
                             max_frames=600, max_label_length=100))
    assert all(lstm.fused for lstm in (*fused.model.encoder, *fused.model.prediction))


def test_fp16_trains_in_float16_with_the_backends_loss_scale():
    """The harness refuses fp16 on a CPU (it measures nothing there); built directly, the layers run
    Keras's mixed_float16 policy under the backend's LossScaleOptimizer, and predict() stays float32."""
    backend = build(TINY.model_copy(update={"precision": "fp16"}))
    batch = random_batch(seed=4)
    before = backend.export_weights()
    losses = [backend.train_step(batch) for _ in range(3)]
    assert all(np.isfinite(losses))
    model = backend.model
    assert {layer.compute_dtype for layer in (*model.encoder, *model.prediction, model.joint_output)} == {"float16"}
    assert isinstance(backend.optimizer, keras.optimizers.LossScaleOptimizer)
    after = backend.export_weights()
    assert all(value.dtype == np.float32 for value in after.values())  # the variables stay float32
    assert [name for name in before if not np.array_equal(before[name], after[name])]
    outputs = backend.predict(batch.inputs())
    assert outputs.dtype == np.float32 and np.isfinite(outputs).all()


TWO_REPLICAS = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import test_tf_rnnt as case
from benchbase.backend import BuildContext, DevicePlan
from benchbase_tf_ds2.backend import TensorFlowBackend

def build(count):
    backend = TensorFlowBackend()
    plan = DevicePlan(kind="cpu", count=count, batch_per_device=4 // count, threads=1)
    backend.build(BuildContext(model=case.NO_DROPOUT, optimizer=case.ADAMW, feature_dimension=case.FEATURES,
                               plan=plan, seed=0, max_frames=600, max_label_length=100))
    return backend

two = build(2)  # first: TensorFlow splits the CPU into two logical devices before its runtime starts
one = build(1)  # a MirroredStrategy of one replica on the first of them
initial = two.export_weights()
one.import_weights(initial)
batch = case.random_batch(seed=1)
losses = {name: [backend.train_step(batch) for _ in range(int(sys.argv[3]))] for name, backend in
          (("two", two), ("one", one))}
np.savez(sys.argv[1], **losses, **{f"initial/{k}": v for k, v in initial.items()},
         **{f"one/{k}": v for k, v in one.export_weights().items()},
         **{f"two/{k}": v for k, v in two.export_weights().items()})
"""
"""Trains the same global batch on two logical CPUs and on one, from the same weights, in a fresh
interpreter (the CPU can be split only before TensorFlow's first operation, which this process
has long passed)."""


@pytest.mark.slow  # a fresh interpreter that imports TensorFlow
def test_two_replicas_train_the_global_batch_as_one_does(tmp_path):
    """Each replica takes half the batch (the second half holds the utterance without an encoder
    frame); the replicas' losses and gradients add up to the whole batch's. Bounds as the torch
    backend's two-rank test: the first loss within both sides' rounding bound of the reference
    loss, compounded over the later steps (``after_steps``), the final weights as a share of how
    far training moved them. Measured: the losses agree to the last bit for four steps."""
    steps, saved = 4, tmp_path / "two-replicas.npz"
    subprocess.run([sys.executable, "-c", TWO_REPLICAS, str(saved), str(Path(__file__).parent), str(steps)],
                   check=True, capture_output=True, timeout=300)
    with np.load(saved) as found:
        two, one = found["two"], found["one"]
        initial, final_one, final_two = ({name.split("/", 1)[1]: found[name] for name in found.files
                                          if name.startswith(prefix)} for prefix in ("initial/", "one/", "two/"))
    batch = random_batch(seed=1)
    first = BOTH_SIDES * bounded_transducer_loss(initial, NO_DROPOUT, batch).bound / abs(one[0])
    relative = np.abs(one - two) / np.abs(one)
    assert (relative <= np.array([after_steps(first, step) for step in range(steps)])).all(), (relative, first)
    moved = np.sqrt(sum(np.sum((final_one[name] - initial[name]) ** 2) for name in initial))
    drift = np.sqrt(sum(np.sum((final_two[name] - final_one[name]) ** 2) for name in initial))
    assert drift <= after_steps(first, steps - 1) * moved, (drift, moved)
