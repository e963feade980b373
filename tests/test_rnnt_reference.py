"""The RNN-T family's spec, weight layout and NumPy reference: the loss against brute force, its
gradient against finite differences and the probability-flow identities, the greedy search
against a model built to emit a known sequence and against the reference's own joint."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pydantic import ValidationError

from benchbase.errors import BenchbaseError
from benchbase.families.rnnt import RNNTModelSpec
from benchbase.families.rnnt.greedy import greedy_decode
from benchbase.families.rnnt.loss import mean_transducer_loss, transducer_loss, transducer_loss_gradient
from benchbase.families.rnnt.quantization import Quantizer
from benchbase.families.rnnt.reference import (
    encoder_forward,
    initial_weights,
    joint,
    lstm_cell,
    prediction_forward,
    random_weights,
)
from benchbase.families.rnnt.weight_layout import validate_weights, weight_layout
from benchbase.numerics.quantization import fake_quantize_weight
from benchbase.specs.model import model_spec_class, validate_model

FEATURES = 5


def tiny_model(**fields) -> RNNTModelSpec:
    sizes = dict(symbols=6, input_stack=2, input_subsample=2, encoder_pre_layers=1, stack_time_factor=2,
                 encoder_post_layers=1, encoder_units=7, prediction_embedding=4, prediction_layers=2,
                 prediction_units=5, joint_units=6, dropout=0.0)
    return RNNTModelSpec(**(sizes | fields))


def random_lattice(rng, batch=4, frames=4, longest=3, symbols=4, blank=0):
    """Normalized log-probabilities, labels with junk padding, and lengths covering the corners."""
    logits = rng.normal(0.0, 1.5, (batch, frames, longest + 1, symbols))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labels = rng.choice([k for k in range(symbols) if k != blank], size=(batch, longest))
    output_lengths = np.array([frames, 1, 2, 3, frames, 1][:batch])
    label_lengths = np.array([longest, longest, 0, 1, 2, 0][:batch])
    labels[np.arange(longest) >= label_lengths[:, None]] = -7  # padding must be ignored, whatever it holds
    return log_probs, labels, output_lengths, label_lengths


def brute_force_loss(log_probs, labels, frames, length, blank):
    """-log of the sum over every alignment: T' - 1 blanks and U labels in any order, then the final blank."""
    total = -np.inf
    for label_steps in itertools.combinations(range(frames + length - 1), length):
        t = u = 0
        path = 0.0
        for step in range(frames + length - 1):
            if step in label_steps:
                path += log_probs[t, u, labels[u]]
                u += 1
            else:
                path += log_probs[t, u, blank]
                t += 1
        total = np.logaddexp(total, path + log_probs[frames - 1, length, blank])
    return -total


# --- the loss -------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "blank"), [(0, 0), (1, 0), (2, 2), (3, 3)])
def test_the_loss_is_minus_the_log_of_the_sum_over_all_alignments(seed, blank):
    log_probs, labels, output_lengths, label_lengths = random_lattice(np.random.default_rng(seed), blank=blank)
    losses = transducer_loss(log_probs, labels, output_lengths, label_lengths, blank)
    expected = [brute_force_loss(log_probs[b], labels[b], output_lengths[b], label_lengths[b], blank)
                for b in range(len(losses))]
    np.testing.assert_allclose(losses, expected, rtol=1e-12)


def test_a_batchs_losses_and_gradients_are_its_rows_own_and_padding_does_not_leak():
    rng = np.random.default_rng(4)
    log_probs, labels, output_lengths, label_lengths = random_lattice(rng)
    losses = transducer_loss(log_probs, labels, output_lengths, label_lengths, 0)
    gradient = transducer_loss_gradient(log_probs, labels, output_lengths, label_lengths, 0)
    for b, (frames, length) in enumerate(zip(output_lengths, label_lengths)):
        own = (log_probs[b : b + 1, :frames, : length + 1], labels[b : b + 1, :length], [frames], [length])
        assert transducer_loss(*own, 0)[0] == pytest.approx(losses[b], rel=1e-13)
        np.testing.assert_allclose(transducer_loss_gradient(*own, 0)[0], gradient[b, :frames, : length + 1],
                                   rtol=1e-12, atol=1e-15)
        assert not gradient[b, frames:].any() and not gradient[b, :, length + 1 :].any()
    moved = np.where(np.random.default_rng(5).random(log_probs.shape[:3])[..., None] < 0.5, log_probs, -3.0)
    inside = (np.arange(4)[None, :, None] < output_lengths[:, None, None]) \
        & (np.arange(4)[None, None, :] <= label_lengths[:, None, None])
    moved = np.where(inside[..., None], log_probs, moved)
    np.testing.assert_array_equal(transducer_loss(moved, labels, output_lengths, label_lengths, 0), losses)


def test_an_utterance_without_output_frames_has_infinite_loss_counted_zero_with_zero_gradient():
    log_probs, labels, output_lengths, label_lengths = random_lattice(np.random.default_rng(6))
    output_lengths[1] = 0
    losses = transducer_loss(log_probs, labels, output_lengths, label_lengths, 0)
    assert np.isinf(losses[1]) and np.isfinite(np.delete(losses, 1)).all()
    mean = mean_transducer_loss(log_probs, labels, output_lengths, label_lengths, 0)
    assert mean == pytest.approx(np.delete(losses, 1).sum() / 4)
    assert mean_transducer_loss(log_probs, labels, output_lengths, label_lengths, 0, impossible="inf") == np.inf
    gradient = transducer_loss_gradient(log_probs, labels, output_lengths, label_lengths, 0)
    assert np.isfinite(gradient).all() and not gradient[1].any()


@pytest.mark.parametrize("seed", [7, 8])
def test_the_gradient_equals_central_finite_differences(seed):
    log_probs, labels, output_lengths, label_lengths = random_lattice(np.random.default_rng(seed), frames=3,
                                                                      longest=2, symbols=3)
    gradient = transducer_loss_gradient(log_probs, labels, output_lengths, label_lengths, 0)
    numeric = np.zeros_like(log_probs)
    step = 1e-6
    for index in np.ndindex(log_probs.shape):
        up, down = log_probs.copy(), log_probs.copy()
        up[index] += step
        down[index] -= step
        change = transducer_loss(up, labels, output_lengths, label_lengths, 0) \
            - transducer_loss(down, labels, output_lengths, label_lengths, 0)
        numeric[index] = change[index[0]] / (2 * step)
    np.testing.assert_allclose(gradient, numeric, atol=1e-8)


def test_the_gradient_is_a_probability_flow_through_the_lattice():
    """Minus the gradient is the share of the probability mass on each transition: every frame
    is left by one blank, every label emitted once, and what enters a cell leaves it."""
    log_probs, labels, output_lengths, label_lengths = random_lattice(np.random.default_rng(9), batch=6,
                                                                      frames=5, longest=3, symbols=5)
    flow = -transducer_loss_gradient(log_probs, labels, output_lengths, label_lengths, 0)
    for b, (frames, length) in enumerate(zip(output_lengths, label_lengths)):
        blanks = flow[b, :frames, : length + 1, 0]
        emits = np.zeros((frames, length + 1))
        emits[:, :length] = flow[b, :frames][:, np.arange(length), labels[b, :length]]
        assert (flow >= 0).all()
        np.testing.assert_allclose(blanks.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(emits[:, :length].sum(axis=0), 1.0, rtol=1e-12)
        entering = np.zeros((frames, length + 1))
        entering[0, 0] = 1.0
        entering[1:, :] += blanks[:-1, :]
        entering[:, 1:] += emits[:, :-1]
        np.testing.assert_allclose(blanks + emits, entering, rtol=1e-12, atol=1e-15)
        assert flow[b, :frames, : length + 1].sum() == pytest.approx(frames + length, rel=1e-12)


def test_the_loss_refuses_a_label_that_is_the_blank_or_out_of_range():
    log_probs, labels, output_lengths, label_lengths = random_lattice(np.random.default_rng(10))
    for wrong in (0, 4):
        bad = labels.copy()
        bad[0, 0] = wrong
        with pytest.raises(ValueError, match="other than the blank"):
            transducer_loss(log_probs, bad, output_lengths, label_lengths, 0)


# --- the forward pass -------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "subsample", "factor"), [(2, 2, 2), (3, 3, 2), (1, 1, 3), (3, 2, 1)])
def test_output_frames_is_the_encoders_output_length_and_padding_never_reaches_a_valid_frame(stack, subsample,
                                                                                            factor):
    model = tiny_model(input_stack=stack, input_subsample=subsample, stack_time_factor=factor)
    rng = np.random.default_rng(11)
    weights = random_weights(model, FEATURES, rng)
    lengths = np.arange(0, 26)
    features = rng.normal(size=(len(lengths), 25, FEATURES))
    encoded, output_lengths = encoder_forward(weights, model, features, np.minimum(lengths, 25))
    assert encoded.shape == (len(lengths), model.output_frames(25), model.joint_units)
    np.testing.assert_array_equal(output_lengths, model.output_frames(np.minimum(lengths, 25)))
    for length in lengths[:25]:
        alone, (frames,) = encoder_forward(weights, model, features[length : length + 1, :length], [length])
        assert alone.shape[1] == frames == model.output_frames(int(length))
        np.testing.assert_allclose(alone[0], encoded[length, :frames], rtol=1e-12, atol=1e-15)


def test_the_prediction_network_starts_from_the_blanks_embedding_and_reads_padding_as_the_blank():
    model = tiny_model(transducer_blank_index=3)
    weights = random_weights(model, FEATURES, np.random.default_rng(12))
    labels = np.array([[1, 2, 5], [4, -1, 99]])
    predicted = prediction_forward(weights, model, labels, [3, 1])
    assert predicted.shape == (2, 4, model.prediction_units)
    as_blank = prediction_forward(weights, model, np.array([[1, 2, 5], [4, 3, 3]]), [3, 3])
    np.testing.assert_array_equal(predicted, as_blank)
    x = weights["prediction.embedding"][3].astype(np.float64)  # the start: the blank's row, from a zero state
    for layer in range(model.prediction_layers):
        prefix = f"prediction.lstm.{layer}"
        x, _ = lstm_cell(x @ weights[f"{prefix}.input_kernel"] + weights[f"{prefix}.bias"], np.zeros(5))
    np.testing.assert_allclose(predicted[:, 0], [x, x], rtol=1e-6)


def test_the_whole_model_gives_a_finite_loss_whose_batch_mean_is_its_rows_mean():
    model = tiny_model()
    rng = np.random.default_rng(13)
    weights = random_weights(model, FEATURES, rng)
    features, feature_lengths = rng.normal(size=(3, 20, FEATURES)), np.array([20, 13, 9])
    labels, label_lengths = np.array([[1, 2, 3], [4, 5, 0], [2, 0, 0]]), np.array([3, 2, 1])
    encoded, output_lengths = encoder_forward(weights, model, features, feature_lengths)
    log_probs = joint(weights, model, encoded, prediction_forward(weights, model, labels, label_lengths))
    assert log_probs.shape == (3, 5, 4, model.symbols)
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-12)
    losses = transducer_loss(log_probs, labels, output_lengths, label_lengths, model.blank_index)
    assert np.isfinite(losses).all() and (losses > 0).all()
    assert mean_transducer_loss(log_probs, labels, output_lengths, label_lengths, 0) == pytest.approx(losses.mean())


# --- the greedy search ------------------------------------------------------------------------


def counting_model() -> tuple[RNNTModelSpec, dict[str, np.ndarray]]:
    """A model whose prediction network remembers the last symbol and whose joint proposes its
    successor (start -> 1 -> 2 -> 3 -> 1 ...) with logit 2, against a blank logit the frame sets."""
    model = tiny_model(symbols=4, prediction_embedding=4, prediction_layers=1, prediction_units=4, joint_units=4)
    weights = initial_weights(model, FEATURES, np.random.default_rng(14))
    gates = np.zeros((4, 16), np.float32)
    gates[:, 8:12] = 10.0 * np.eye(4)  # cell candidate: tanh(10) ~ 1 for the symbol fed, 0 for the others
    weights["prediction.embedding"] = np.eye(4, dtype=np.float32)
    weights["prediction.lstm.0.input_kernel"] = gates
    weights["prediction.lstm.0.recurrent_kernel"] = np.zeros((4, 16), np.float32)
    weights["prediction.lstm.0.bias"] = np.array([10] * 4 + [-10] * 4 + [0] * 4 + [10] * 4, np.float32)
    successor = np.zeros((4, 4), np.float32)
    successor[[0, 1, 2, 3], [1, 2, 3, 1]] = 2.0 / np.tanh(1.0)  # h = tanh(c) ~ tanh(1) for the last symbol
    weights["joint.prediction.kernel"], weights["joint.prediction.bias"] = successor, np.zeros(4, np.float32)
    weights["joint.output.kernel"], weights["joint.output.bias"] = np.eye(4, dtype=np.float32), np.zeros(4, np.float32)
    return model, weights


def blank_strengths(*frames: float) -> np.ndarray:
    encoded = np.zeros((len(frames), 4), np.float32)
    encoded[:, 0] = frames
    return encoded


@pytest.mark.parametrize(("most", "expected"), [(1, [[1, 2], [1]]), (2, [[1, 2, 3, 1], [1, 2]]),
                                                (3, [[1, 2, 3, 1, 2, 3], [1, 2, 3]])])
def test_greedy_emits_until_the_blank_or_the_frames_limit_and_stops_at_the_output_length(most, expected):
    model, weights = counting_model()
    # Frames of blank logit 1 emit (the successor's 2 wins) up to the limit; 3 moves on at once.
    # The second utterance's third frame would emit, but it is past its length.
    encoded = np.stack([blank_strengths(1, 3, 1), blank_strengths(3, 1, 1)])
    assert greedy_decode(weights, model, encoded, np.array([3, 2]), most) == expected


def reference_greedy(weights, model, encoded, frames, most):
    """The search spelled out with the float64 reference: the whole prefix re-run at each step."""
    transcript: list[int] = []
    for t in range(frames):
        for _ in range(most):
            predicted = prediction_forward(weights, model, np.array([transcript], int).reshape(1, -1),
                                           [len(transcript)])
            symbol = int(np.argmax(joint(weights, model, encoded[None, t : t + 1], predicted[:, -1:])[0, 0, 0]))
            if symbol == model.blank_index:
                break
            transcript.append(symbol)
    return transcript


@pytest.mark.parametrize(("seed", "activation", "blank"), [(15, "relu", 0), (16, "tanh", 2)])
def test_batched_greedy_equals_the_search_one_utterance_at_a_time(seed, activation, blank):
    model = tiny_model(joint_activation=activation, transducer_blank_index=blank)
    rng = np.random.default_rng(seed)
    weights = random_weights(model, FEATURES, rng)
    encoded = rng.normal(0.0, 1.5, (5, 7, model.joint_units))
    lengths = np.array([7, 3, 0, 5, 1])
    batched = greedy_decode(weights, model, encoded, lengths, 3)
    assert sum(map(len, batched)) > 5
    for row, length in enumerate(lengths):
        assert greedy_decode(weights, model, encoded[row : row + 1, :length], [length], 3) == [batched[row]]
        assert batched[row] == reference_greedy(weights, model, encoded[row], length, 3)


# --- the spec and the layout --------------------------------------------------------------------


def test_mlperfs_configuration_validates_with_about_49_million_parameters():
    model = validate_model({"family": "rnnt", "symbols": 1024, "transducer_blank_index": 1023})
    assert isinstance(model, RNNTModelSpec) and model_spec_class("rnnt") is RNNTModelSpec
    count = model.parameter_count(80)  # 80 mel bands, 3 stacked: 240 encoder inputs
    print(f"MLPerf RNN-T, 1024 symbols: {count:,} parameters")
    # MLPerf's PyTorch model: 49,006,080, with two biases per LSTM gate and no embedding row for the blank.
    assert count + 4 * (5 * 1024 + 2 * 512) - 512 == 49_006_080


@pytest.mark.parametrize("fields", [{}, {"input_stack": 1, "input_subsample": 1, "stack_time_factor": 3},
                                    {"prediction_layers": 3, "joint_units": 2, "symbols": 1024}])
def test_the_layouts_size_is_the_parameter_count_and_validate_weights_checks_it(fields):
    model = tiny_model(**fields)
    layout = weight_layout(model, FEATURES)
    assert sum(int(np.prod(shape)) for shape in layout.values()) == model.parameter_count(FEATURES)
    weights = random_weights(model, FEATURES, np.random.default_rng(17))
    validate_weights(weights, model, FEATURES)
    with pytest.raises(BenchbaseError, match="missing"):
        validate_weights({k: v for k, v in weights.items() if k != "joint.output.bias"}, model, FEATURES)
    with pytest.raises(BenchbaseError, match="prediction.embedding: shape"):
        validate_weights(weights | {"prediction.embedding": np.zeros((1, 1))}, model, FEATURES)


def test_the_initial_weights_are_xavier_with_the_forget_bias():
    model = tiny_model(lstm_forget_bias=1.5)
    weights = initial_weights(model, FEATURES, np.random.default_rng(18))
    assert weights["encoder.lstm.0.bias"].tolist() == [0.0] * 7 + [1.5] * 7 + [0.0] * 14
    assert not weights["joint.output.bias"].any()
    limit = np.sqrt(6.0 / (model.encoder_units + 4 * model.encoder_units))
    assert 0.8 * limit < np.abs(weights["encoder.lstm.1.recurrent_kernel"]).max() <= limit


def test_the_spec_rejects_a_blank_outside_the_symbols_and_an_unknown_quantized_tensor():
    with pytest.raises(ValidationError, match="not among the 6 symbols"):
        tiny_model(transducer_blank_index=6)
    with pytest.raises(ValidationError, match="lstm.input"):
        tiny_model(quantization={"tensors": ["lstm.input"]})
    assert "joint.output.kernel" in tiny_model().quantization.tensors


# --- int8-emulated ----------------------------------------------------------------------------


def test_an_int8_model_keeps_a_range_for_each_quantized_input_and_only_then():
    assert not any(name.endswith("input_range") for name in weight_layout(tiny_model(), FEATURES))
    layout = weight_layout(tiny_model(precision="int8-emulated"), FEATURES)
    assert [name for name in layout if name.endswith("input_range")] == [
        "encoder.lstm.0.input_range", "encoder.lstm.1.input_range", "prediction.lstm.0.input_range",
        "prediction.lstm.1.input_range", "joint.encoder.input_range", "joint.prediction.input_range",
        "joint.output.input_range"]
    some = tiny_model(precision="int8-emulated", quantization={"tensors": ["joint.output.input", "encoder.lstm.input"]})
    assert [name for name in weight_layout(some, FEATURES) if name.endswith("input_range")] == [
        "encoder.lstm.0.input_range", "encoder.lstm.1.input_range", "joint.output.input_range"]


def whole_model(weights, model, features, feature_lengths, labels, label_lengths, quantizer=None):
    encoded, _ = encoder_forward(weights, model, features, feature_lengths, quantizer)
    return joint(weights, model, encoded, prediction_forward(weights, model, labels, label_lengths, quantizer),
                 quantizer)


def test_quantized_kernels_are_the_float_model_on_fake_quantized_weights():
    kernels = [name for name in RNNTModelSpec.quantizable_tensors if name.endswith("kernel")]
    model = tiny_model(precision="int8-emulated", quantization={"tensors": kernels})
    rng = np.random.default_rng(19)
    weights = random_weights(model, FEATURES, rng)
    inputs = (rng.normal(size=(2, 12, FEATURES)), [12, 9], np.array([[1, 2], [3, 0]]), [2, 1])
    quantized = {name: fake_quantize_weight(value, model.quantization) if name.endswith("kernel") else value
                 for name, value in weights.items()}
    expected = whole_model(quantized, tiny_model(), *inputs)
    np.testing.assert_allclose(whole_model(weights, model, *inputs), expected, rtol=1e-12, atol=1e-12)
    assert np.abs(whole_model(weights, tiny_model(), *inputs) - expected).max() > 1e-4


def test_a_training_pass_sets_each_range_from_its_inputs_and_inference_keeps_them():
    model = tiny_model(precision="int8-emulated")
    rng = np.random.default_rng(20)
    weights = initial_weights(model, FEATURES, rng)  # every range 0: the first step sets it to max|x|
    features = rng.normal(size=(2, 12, FEATURES))
    inputs = (features, [12, 9], np.array([[1, 2], [3, 0]]), [2, 1])
    training = Quantizer(weights, model, training=True)
    log_probs = whole_model(weights, model, *inputs, training)
    assert training.ranges["encoder.lstm.0.input_range"] == np.float32(np.abs(features).max())
    assert all(0 < value <= 1 for name, value in training.ranges.items()  # LSTM outputs lie in (-1, 1)
               if name.startswith(("encoder.lstm.1", "prediction.lstm.1", "joint.prediction")))
    trained = weights | {name: np.asarray(value) for name, value in training.ranges.items()}
    inference = Quantizer(trained, model, training=False)
    np.testing.assert_allclose(whole_model(trained, model, *inputs, inference), log_probs, rtol=1e-12)
    assert inference.ranges == training.ranges
    float_model = whole_model(weights, tiny_model(), *inputs)
    assert 0 < np.abs(log_probs - float_model).max() < 0.1


def test_greedy_searches_an_int8_model_as_the_quantized_reference_evaluates_it():
    model = tiny_model(precision="int8-emulated")
    rng = np.random.default_rng(21)
    weights = random_weights(model, FEATURES, rng)
    encoded = rng.normal(0.0, 1.5, (4, 6, model.joint_units))
    lengths = np.array([6, 2, 4, 5])
    batched = greedy_decode(weights, model, encoded, lengths, 3)
    assert batched != greedy_decode(weights, tiny_model(), encoded, lengths, 3)
    for row, length in enumerate(lengths):
        assert batched[row] == reference_greedy(weights, model, encoded[row], length, 3)
