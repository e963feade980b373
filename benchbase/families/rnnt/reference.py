"""benchbase's NumPy reference of the RNN-T model family: the forward pass the spec pins.

Computed in float64 from float32 weights in the framework-neutral layout
(``benchbase.families.rnnt.weight_layout``), so that a backend's float32 results can be
compared with it on the very same weights. Dropout is never applied (the conformance kit
trains with dropout 0). Every LSTM starts from a zero state, its gates in the order i, f, g, o:

    z = x @ input_kernel + h(t-1) @ recurrent_kernel + bias
    c(t) = sigmoid(z_f) * c(t-1) + sigmoid(z_i) * tanh(z_g);   h(t) = sigmoid(z_o) * tanh(c(t))

What a backend's ``predict()`` returns, and the harness decodes, is ``encoder_forward``'s
``encoded``: the joint's encoder projection f(t) = encoder(x)(t) @ joint.encoder.kernel + bias,
(batch, T', joint_units). The backend runs the part of the model that sees the audio; the
harness runs the prediction network and the joint on the exported weights itself
(``greedy_decode``), so the search, and so the score, is the harness's. The projection rather
than the encoder's top layer: it is half as wide (512 against 1024 at MLPerf's size), and a
search step is then one addition, one activation and one matmul (and the prediction network's
step after an emitted label).

A model of precision int8-emulated is fake-quantized where ``model.quantization`` says, by a
``benchbase.families.rnnt.quantization.Quantizer`` (the encoder projection's input and kernel
included: ``predict()`` returns them quantized); every other precision is computed as fp32.

The transducer loss (``transducer_loss``) and its gradient are in ``benchbase.families.rnnt.loss``,
the greedy search in ``benchbase.families.rnnt.greedy``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.families.rnnt.quantization import Quantizer
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names, weight_layout

__all__ = [
    "encoder_forward",
    "initial_weights",
    "joint",
    "lattice_cells",
    "lstm_cell",
    "prediction_forward",
    "random_weights",
    "stack_frames",
]


def encoder_forward(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, features: np.ndarray,
                    feature_lengths: np.ndarray, quantizer: Quantizer | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(encoded, output_lengths): what ``predict()`` returns, float64 (batch, T', joint_units), and
    ``model.output_frames(feature_lengths)`` (int32).

    T' is ``model.output_frames`` of the padded batch's frames. Frames at or past an utterance's
    output length are computed over its padding, as a backend computes them; the loss and the
    decoder never read them. ``quantizer``: see ``joint``.
    """
    features = np.asarray(features, dtype=np.float64)
    feature_lengths = np.asarray(feature_lengths)
    if features.ndim != 3 or feature_lengths.shape != (features.shape[0],):
        raise ValueError(f"features must be (batch, frames, dimension) and feature_lengths (batch,), got "
                         f"{features.shape} and {feature_lengths.shape}")
    w, quantizer = _float64(weights), quantizer or Quantizer(weights, model, training=False)
    layers = encoder_layer_names(model)
    x = stack_frames(features, model.input_stack, model.input_subsample)
    for prefix in layers[: model.encoder_pre_layers]:
        x = _lstm(x, w, prefix, quantizer)
    x = stack_frames(x, model.stack_time_factor, model.stack_time_factor)
    for prefix in layers[model.encoder_pre_layers :]:
        x = _lstm(x, w, prefix, quantizer)
    return _dense(x, w, "joint.encoder", quantizer), model.output_frames(feature_lengths)


def prediction_forward(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, labels: np.ndarray,
                       label_lengths: np.ndarray, quantizer: Quantizer | None = None) -> np.ndarray:
    """The prediction network's output g(u), float64 (batch, U + 1, prediction_units).

    Its inputs are the start symbol (the blank, embedded by its own row of
    ``prediction.embedding``) and then each label: g(u) has seen the first u labels. ``labels``
    is (batch, U); labels at or past an utterance's length are read as the blank, whatever
    they hold, and the outputs there are computed over them. ``quantizer``: see ``joint``.
    """
    labels, label_lengths = np.asarray(labels, dtype=np.int64), np.asarray(label_lengths)
    w, quantizer = _float64(weights), quantizer or Quantizer(weights, model, training=False)
    blank = model.blank_index
    padded = np.where(np.arange(labels.shape[1]) < label_lengths[:, None], labels, blank)
    symbols = np.concatenate([np.full((labels.shape[0], 1), blank), padded], axis=1)
    x = w["prediction.embedding"][symbols]
    for prefix in prediction_layer_names(model):
        x = _lstm(x, w, prefix, quantizer)
    return x


def joint(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, encoded: np.ndarray,
          predicted: np.ndarray, quantizer: Quantizer | None = None,
          lengths: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Log-probabilities (batch, T', U + 1, symbols), float64, log-softmax over the symbols:

        log_softmax(activation(f(t) + g(u) @ joint.prediction.kernel + joint.prediction.bias)
                    @ joint.output.kernel + joint.output.bias)

    ``encoded`` is ``encoder_forward``'s f (the encoder projection, its bias included) and
    ``predicted`` ``prediction_forward``'s g.

    ``quantizer``: int8-emulated's fake quantization (``benchbase.families.rnnt.quantization``),
    one for a whole training step's encoder, prediction network and joint, whose ``ranges``
    then hold the ranges the step leaves; none: inference with the ranges in ``weights``. Every
    other precision is computed as fp32 (in float64). ``lengths``: (output_lengths,
    label_lengths), which a training pass needs: joint.output's range is over the cells within
    them (``benchbase.families.rnnt.quantization``); none: every cell.
    """
    w, quantizer = _float64(weights), quantizer or Quantizer(weights, model, training=False)
    projected = _dense(np.asarray(predicted, dtype=np.float64), w, "joint.prediction", quantizer)
    hidden = np.asarray(encoded, dtype=np.float64)[:, :, None, :] + projected[:, None, :, :]
    hidden = np.maximum(hidden, 0.0) if model.joint_activation == "relu" else np.tanh(hidden)
    inside = None if lengths is None else lattice_cells(lengths[0], lengths[1], hidden.shape[1],
                                                        hidden.shape[2])[..., None]
    logits = _dense(hidden, w, "joint.output", quantizer, inside)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def stack_frames(x: np.ndarray, width: int, stride: int) -> np.ndarray:
    """(batch, frames, features) -> (batch, windows, width * features): whole windows of ``width``
    consecutive frames, ``stride`` apart, each window's frames side by side in time order
    (``spec.stacked_frames`` windows). Input stacking and the encoder's time stacking."""
    batch, frames, features = x.shape
    if frames < width:
        return np.zeros((batch, 0, width * features), dtype=x.dtype)
    windows = np.lib.stride_tricks.sliding_window_view(x, width, axis=1)[:, ::stride]  # (b, n, f, width)
    return windows.transpose(0, 1, 3, 2).reshape(batch, -1, width * features)


def lstm_cell(z: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(h, c) after one step from the gates' pre-activations ``z`` (..., 4 * units), order i, f, g, o."""
    i, f, g, o = np.split(z, 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def lattice_cells(output_lengths: np.ndarray, label_lengths: np.ndarray, frames: int, positions: int) -> np.ndarray:
    """(batch, frames, positions) bool: the cells (t, u) of each utterance's lattice, t < T', u <= U."""
    return ((np.arange(frames) < np.asarray(output_lengths)[:, None])[:, :, None]
            & (np.arange(positions) <= np.asarray(label_lengths)[:, None])[:, None, :])


def _dense(x: np.ndarray, w: Mapping[str, np.ndarray], prefix: str, quantizer: Quantizer,
           inside: np.ndarray | None = None) -> np.ndarray:
    kernel = quantizer.kernel(f"{prefix}.kernel", w[f"{prefix}.kernel"])
    return quantizer.input(prefix, x, inside) @ kernel + w[f"{prefix}.bias"]


def _lstm(x: np.ndarray, w: Mapping[str, np.ndarray], prefix: str, quantizer: Quantizer) -> np.ndarray:
    """A unidirectional LSTM from a zero state: (batch, frames, inputs) -> (batch, frames, units)."""
    recurrent = quantizer.kernel(f"{prefix}.recurrent_kernel", w[f"{prefix}.recurrent_kernel"])
    state = quantizer.recurrent_state(prefix)
    input_kernel = quantizer.kernel(f"{prefix}.input_kernel", w[f"{prefix}.input_kernel"])
    projected = quantizer.input(prefix, x) @ input_kernel + w[f"{prefix}.bias"]  # every frame's input part at once
    h = np.zeros((x.shape[0], recurrent.shape[0]), dtype=x.dtype)
    c = np.zeros_like(h)
    outputs = np.empty((*x.shape[:2], recurrent.shape[0]), dtype=x.dtype)
    for frame in range(x.shape[1]):
        h, c = lstm_cell(projected[:, frame] + state(h) @ recurrent, c)
        outputs[:, frame] = h
    return outputs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # the tanh form never overflows


def _float64(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}


def initial_weights(model: RNNTModelSpec, feature_dimension: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """float32 weights as ``model.init`` pins them: every matrix Xavier-uniform,
    U(+-sqrt(6 / (rows + columns))) over the whole matrix of the layout; biases zero but each
    LSTM's forget-gate block, ``model.lstm_forget_bias``; an int8-emulated model's activation
    ranges 0 (the first training step sets them)."""
    weights = {}
    for name, shape in weight_layout(model, feature_dimension).items():
        if len(shape) == 2:
            weights[name] = _xavier_uniform(rng, shape)
        else:
            weights[name] = np.zeros(shape)
            if ".lstm." in name and name.endswith(".bias"):
                units = shape[0] // 4
                weights[name][units : 2 * units] = model.lstm_forget_bias
    return {name: array.astype(np.float32) for name, array in weights.items()}


def random_weights(model: RNNTModelSpec, feature_dimension: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights in the layout, for parity checks: matrices as ``initial_weights``
    draws them, every bias N(0, 0.1) (a bias a backend drops must show), an int8-emulated
    model's activation ranges U(0.5, 3) (some inputs saturate, most do not)."""
    weights = initial_weights(model, feature_dimension, rng)
    for name, array in weights.items():
        if array.ndim == 1:
            weights[name] = rng.normal(0.0, 0.1, array.shape).astype(np.float32)
        elif array.ndim == 0:
            weights[name] = np.float32(rng.uniform(0.5, 3.0))
    return weights


def _xavier_uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    limit = np.sqrt(6.0 / (shape[0] + shape[1]))
    return rng.uniform(-limit, limit, shape)
