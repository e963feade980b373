"""What every CTC family shares: the evaluation head on predict()'s log-probabilities, and the
reference's training step with its float32 bound.

A family whose ``predict()`` returns per-frame log-probabilities over the symbols (ds2, a
plugin's linear-ctc) decodes them with the workload's decoder and is trained on the spec's
mean CTC loss; only its forward pass is its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchbase.backend import Batch
from benchbase.decode.factory import Decoder
from benchbase.decode.greedy import greedy_decode
from benchbase.families.parts import ReferenceStep, Weights
from benchbase.metrics.ctc import ctc_loss
from benchbase.numerics.tolerances import RoundingModel, ctc_recursion_bound, rounding_bound
from benchbase.specs import ModelSpec

__all__ = ["CTCHead", "CTCParts", "bounded_ctc_step", "ctc_impossible_frames"]

ForwardPass = Callable[[RoundingModel | None], tuple[np.ndarray, dict[str, np.ndarray]]]
"""A training forward pass with a rounding model's moves (none: exact): the log-probabilities
(batch, frames, symbols), float64, and the running statistics it leaves."""


class CTCHead:
    """predict()'s log-probabilities decoded by the workload's decoder; the CTC loss of each utterance."""

    def __init__(self, decoder: Decoder, model: ModelSpec) -> None:
        self.decoder = decoder
        self.model = model

    def decode(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return self.decoder.decode(outputs, lengths)

    def greedy(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return greedy_decode(outputs, lengths, self.model.blank_index, self.decoder.vocabulary)

    def losses(self, outputs: np.ndarray, batch: Batch) -> np.ndarray:
        losses = ctc_loss(outputs, batch.output_lengths, batch.labels, batch.label_lengths, self.model.blank_index)
        return np.where(np.isinf(losses), 0.0, losses)  # every CTC family counts an impossible alignment zero


def bounded_ctc_step(forward: ForwardPass, batch: Batch, blank: int, momentum: float = 0.0) -> ReferenceStep:
    """The spec's mean CTC loss of ``forward`` on ``batch`` (an impossible alignment counted zero) and
    the running statistics it leaves, each with one float32 side's bound: the loss from the moved
    log-probabilities, plus the CTC recursion's own roundings (``ctc_recursion_bound``)."""
    def compute(rounding: RoundingModel | None) -> dict[str, np.ndarray]:
        log_probs, running = forward(rounding)
        losses = ctc_loss(log_probs, batch.output_lengths, batch.labels, batch.label_lengths, blank)
        return {**running, "loss": np.asarray(np.where(np.isfinite(losses), losses, 0.0).mean()), "losses": losses}

    exact, bound = rounding_bound(compute)
    losses = exact.pop("losses")
    loss_bound = float(bound.pop("loss")) + ctc_recursion_bound(batch.output_lengths, losses)
    loss = float(exact.pop("loss"))
    return ReferenceStep(loss, losses, loss_bound, exact, {name: bound[name] for name in exact}, momentum)


def ctc_step_loss(log_probs: np.ndarray, batch: Batch, blank: int) -> float:
    """The spec's mean CTC loss of a training pass's ``log_probs`` on ``batch`` (an impossible
    alignment counted zero), without bounds: what the kit differentiates."""
    losses = ctc_loss(log_probs, batch.output_lengths, batch.labels, batch.label_lengths, blank)
    return float(np.where(np.isfinite(losses), losses, 0.0).mean())


def ctc_impossible_frames(model: ModelSpec, labels: int) -> int:
    """Feature frames that leave CTC half as many output frames as ``labels`` (at least one)."""
    frames = model.input_frames_for(max(labels // 2, 1))
    assert model.output_frames(frames) < labels, (frames, labels)
    return frames


class CTCParts:
    """The parts every CTC family shares (``FamilyParts``' CTC half): predict() returns per-frame
    log-probabilities over ``model.symbols``, decoded by the workload's decoder; a subclass adds
    its layout, its reference and its kit model."""

    loss_name = "CTC loss"
    outputs_name = "log-probabilities"
    log_probability_outputs = True

    def evaluation_head(self, model: ModelSpec, decoder: Decoder, weights: Callable[[], Weights]) -> CTCHead:
        return CTCHead(decoder, model)  # CTC decoding needs the log-probabilities only, never the weights

    def output_width(self, model: ModelSpec) -> int:
        return int(model.symbols)

    def impossible_frames(self, model: ModelSpec, labels: int) -> int:
        return ctc_impossible_frames(model, labels)

    def without_dropout(self, model: ModelSpec) -> ModelSpec:
        """A family whose dropout is not one field called ``dropout`` overrides this."""
        return model.model_copy(update={"dropout": 0.0})
