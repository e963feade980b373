"""The transducer family's reference with the error model's roundings, and its error bounds.

``rounded_encoder``, ``rounded_prediction`` and ``rounded_joint`` are ``reference``'s passes with
a rounding model's moves injected (``benchbase.numerics.rounded``); ``bounded_transducer_loss``
derives the loss's float32 bound from them. ``transducer_gradient_bound`` and ``joint_bound``
are worst-case first-order bounds from the error model's rules (``benchbase.numerics.tolerances``),
shared by every backend's rnnt tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from benchbase.backend import Batch
from benchbase.families.rnnt.loss import transducer_loss
from benchbase.families.rnnt.quantization import Quantizer, input_range_names
from benchbase.families.rnnt.reference import lattice_cells, stack_frames
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names
from benchbase.numerics.rounded import RoundedArithmetic, lstm_layer
from benchbase.numerics.tolerances import (
    ELEMENTWISE_ULPS,
    FLOAT32_UNIT_ROUNDOFF,
    accumulation_bound,
    ctc_recursion_bound,
    rounding_bound,
)

__all__ = [
    "BoundedLoss",
    "bounded_transducer_loss",
    "joint_bound",
    "rounded_encoder",
    "rounded_joint",
    "rounded_prediction",
    "transducer_gradient_bound",
]


def transducer_gradient_bound(gradient, losses, steps, unit_roundoff):
    """A gradient entry is -exp(x), x = alpha + log p + beta - log P, each term from a recursion of at
    most ``steps`` log-add-exps, so |dx| <= (ELEMENTWISE_ULPS + 2) u steps (|alpha| + |log p| + |beta| +
    |log P|). The three terms are log-probabilities (<= 0) summing to log P + log|g|, so the sum of
    magnitudes is 2 |log P| + |log|g||, and the entry moves by |g| (|dx| + the exp's own ulps). Autodiff
    through the forward recursion reaches the same entry as a product of each step's local weights
    exp(a - logaddexp(a, b)), whose arguments carry the same roundings of the alphas."""
    magnitude = np.abs(gradient)
    log_likelihood = np.abs(np.where(np.isinf(losses), 0.0, losses))[:, None, None, None]
    with np.errstate(divide="ignore"):
        log_magnitude = np.where(magnitude > 0, np.abs(np.log(np.where(magnitude > 0, magnitude, 1.0))), 0.0)
    exponent = (ELEMENTWISE_ULPS + 2) * unit_roundoff * steps[:, None, None, None] * (2 * log_likelihood
                                                                                      + log_magnitude)
    # expm1(|dx|) <= 2 |dx| while |dx| < 1; the floor: a float32 entry that underflows to a subnormal
    return magnitude * (2 * exponent + ELEMENTWISE_ULPS * unit_roundoff) + np.finfo(np.float32).tiny


def joint_bound(weights, encoded, predicted):
    """One float32 side's error bound of ``reference.joint``, worst case per operation and carried
    forward by each step's Lipschitz constant (rules 2 to 4 of the error model, first order):
    rounding_bound's random signs can cancel within one element, which a worst case cannot."""
    u = FLOAT32_UNIT_ROUNDOFF
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    kernel, bias = w["joint.prediction.kernel"], w["joint.prediction.bias"]
    projected = predicted @ kernel + bias
    projected_error = accumulation_bound(kernel.shape[0] + 1) * (np.abs(predicted) @ np.abs(kernel) + np.abs(bias))
    before = encoded[:, :, None, :] + projected[:, None, :, :]
    hidden = np.maximum(before, 0.0)  # ReLU moves nothing by more than its input moved
    hidden_error = u * np.abs(before) + projected_error[:, None, :, :]
    kernel, bias = w["joint.output.kernel"], w["joint.output.bias"]
    logits = hidden @ kernel + bias
    logits_error = (accumulation_bound(kernel.shape[0] + 1) * (np.abs(hidden) @ np.abs(kernel) + np.abs(bias))
                    + hidden_error @ np.abs(kernel))
    # z_k - logsumexp(z) moves by at most z_k's move plus the largest one; then its own roundings:
    # the shift, each exp, the sum of the symbols (relative), the log, the subtraction.
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    own = (u * (np.abs(shifted - log_total) + 2 * np.abs(shifted).max(axis=-1, keepdims=True))
           + accumulation_bound(logits.shape[-1]) + (ELEMENTWISE_ULPS + 1) * u * (1 + np.abs(log_total)))
    return logits_error + logits_error.max(axis=-1, keepdims=True) + own


def rounded_encoder(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, features: np.ndarray,
                    rounded: RoundedArithmetic, quantizer: Quantizer | None = None) -> np.ndarray:
    """``reference.encoder_forward``'s projection with ``rounded``'s moves injected (none: the same
    numbers); ``quantizer``: a training pass's (none: inference, the identity unless int8-emulated)."""
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    quantizer = quantizer or Quantizer(weights, model, training=False)
    x = stack_frames(np.asarray(features, dtype=np.float64), model.input_stack, model.input_subsample)
    for index, prefix in enumerate(encoder_layer_names(model)):
        if index == model.encoder_pre_layers:
            x = stack_frames(x, model.stack_time_factor, model.stack_time_factor)
        input_kernel = quantizer.kernel(f"{prefix}.input_kernel", w[f"{prefix}.input_kernel"])
        recurrent_kernel = quantizer.kernel(f"{prefix}.recurrent_kernel", w[f"{prefix}.recurrent_kernel"])
        x = lstm_layer(quantizer.input(prefix, x), input_kernel, recurrent_kernel, w[f"{prefix}.bias"],
                       quantizer.recurrent_state(prefix), rounded)
    kernel = quantizer.kernel("joint.encoder.kernel", w["joint.encoder.kernel"])
    return rounded.dot(quantizer.input("joint.encoder", x), kernel, w["joint.encoder.bias"])


@dataclass(frozen=True)
class BoundedLoss:
    """The reference's view of a batch's transducer loss (a training pass's)."""

    loss: float
    """The spec's mean over the batch, an utterance without an encoder frame counted zero."""
    losses: np.ndarray
    """Each utterance's loss (+inf where it has no encoder frame)."""
    bound: float
    """How far one float32 computation of ``loss`` may land from it."""
    ranges: dict[str, np.ndarray] = field(default_factory=dict)
    """The activation ranges the pass leaves, by name (int8-emulated; empty otherwise)."""
    range_bounds: dict[str, np.ndarray] = field(default_factory=dict)
    """How far one float32 computation of each range may land from it."""


def bounded_transducer_loss(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, batch: Batch) -> BoundedLoss:
    """The spec's mean transducer loss (``reference.prediction_forward``, ``joint``, ``loss``) on
    ``weights`` and one float32 side's bound on it: the encoder, prediction network and joint
    with every operation moved (``rounding_bound``), then the loss recursion's own roundings, a
    log-add-exp per anti-diagonal and one for the final blank (``ctc_recursion_bound``).

    An int8-emulated model's pass is a training pass's: each range updated by its layer's input
    as it passes (joint.output's over the lattice cells within the lengths) and quantized with,
    the ranges it leaves bounded by the same rounding model (a flipped grid step moves a maximum)."""
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    frames = int(batch.output_lengths.max(initial=0))
    names = input_range_names(model)

    def compute(rounding) -> dict[str, np.ndarray]:
        rounded, quantizer = RoundedArithmetic(rounding), Quantizer(weights, model, training=True)
        encoded = rounded_encoder(weights, model, batch.features, rounded, quantizer)[:, :frames]
        predicted = rounded_prediction(w, model, batch, rounded, quantizer)
        inside = lattice_cells(batch.output_lengths, batch.label_lengths, frames, predicted.shape[1])
        log_probs = rounded_joint(w, model, encoded, predicted, rounded, quantizer, inside)
        losses = transducer_loss(log_probs, batch.labels, batch.output_lengths, batch.label_lengths,
                                 model.blank_index)
        return {"loss": np.asarray(np.where(np.isinf(losses), 0.0, losses).mean()), "losses": losses,
                **{name: np.asarray(quantizer.ranges[name]) for name in names}}

    exact, moved = rounding_bound(compute)
    steps = batch.output_lengths + batch.label_lengths + 1
    bound = float(moved["loss"]) + ctc_recursion_bound(steps, exact["losses"])
    return BoundedLoss(float(exact["loss"]), exact["losses"], bound, {name: exact[name] for name in names},
                       {name: moved[name] for name in names})


def rounded_prediction(w: Mapping[str, np.ndarray], model: RNNTModelSpec, batch: Batch,
                       rounded: RoundedArithmetic, quantizer: Quantizer | None = None) -> np.ndarray:
    """``reference.prediction_forward`` with ``rounded``'s moves injected; ``quantizer``: a training
    pass's fake quantization (none: inference, the identity unless ``model`` is int8-emulated)."""
    quantizer = quantizer or Quantizer(w, model, training=False)
    blank = model.blank_index
    labels = np.where(np.arange(batch.labels.shape[1]) < batch.label_lengths[:, None], batch.labels, blank)
    x = w["prediction.embedding"][np.concatenate([np.full((len(labels), 1), blank), labels], axis=1)]
    for prefix in prediction_layer_names(model):
        input_kernel = quantizer.kernel(f"{prefix}.input_kernel", w[f"{prefix}.input_kernel"])
        recurrent_kernel = quantizer.kernel(f"{prefix}.recurrent_kernel", w[f"{prefix}.recurrent_kernel"])
        x = lstm_layer(quantizer.input(prefix, x), input_kernel, recurrent_kernel, w[f"{prefix}.bias"],
                       quantizer.recurrent_state(prefix), rounded=rounded)
    return x


def rounded_joint(w: Mapping[str, np.ndarray], model: RNNTModelSpec, encoded: np.ndarray, predicted: np.ndarray,
                  rounded: RoundedArithmetic, quantizer: Quantizer | None = None,
                  inside: np.ndarray | None = None) -> np.ndarray:
    """``reference.joint`` with ``rounded``'s moves injected; ``quantizer`` as ``rounded_prediction``'s,
    ``inside`` the lattice's cells within the lengths (joint.output's range in training)."""
    quantizer = quantizer or Quantizer(w, model, training=False)
    kernel = quantizer.kernel("joint.prediction.kernel", w["joint.prediction.kernel"])
    projected = rounded.dot(quantizer.input("joint.prediction", predicted), kernel, w["joint.prediction.bias"])
    hidden = rounded.function(encoded[:, :, None, :] + projected[:, None, :, :])
    hidden = np.maximum(hidden, 0.0) if model.joint_activation == "relu" else rounded.function(np.tanh(hidden))
    hidden = quantizer.input("joint.output", hidden, None if inside is None else inside[..., None])
    logits = rounded.dot(hidden, quantizer.kernel("joint.output.kernel", w["joint.output.kernel"]),
                         w["joint.output.bias"])
    shifted = rounded.function(logits - logits.max(axis=-1, keepdims=True))
    total = rounded.sum(rounded.function(np.exp(shifted)), axis=-1)
    return rounded.function(shifted - rounded.function(np.log(total))[..., None])
