"""What the harness, `benchbase verify` and independent scoring need of a model family, beside its spec.

The harness knows no family: it asks ``family_parts(model)`` for the family's parts and uses
only what this module's protocols name. A family's package holds a ``parts`` module with a
``PARTS`` object: the module its spec class names in ``ModelSpec.parts_module`` (a plugin's
family, whose package is not benchbase's), or by default ``benchbase.families.<family>.parts``
(benchbase's own).

What ``predict()`` returns is the family's choice, stated in its package: per-frame
log-probabilities for CTC (ds2), the joint network's encoder projection for a transducer
(rnnt). Whatever it is, the family turns it into text and a loss (``EvaluationHead``), and
computes it itself from exported weights (``reference_outputs``, ``bounded_outputs``), so
that what decides a score is always re-checkable without the backend.

The conformance kit (``benchbase.kit``) proves a backend of any family through the same parts:
the family's small model for the kit (``kit_model``), random weights in its layout, the
reference's training step with its float32 bounds (``reference_step``), and how to cut an
utterance so that its labels cannot be aligned (``impossible_frames``). So a family that a plugin
brings is proven by ``benchbase backend-test NAME --family F`` with no edit to benchbase; a family
with int8-emulated adds its ``quantized_reference`` and is proven in it by ``--precision int8-emulated``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec, OptimizerSpec
from benchbase.specs.model import model_spec_class

if TYPE_CHECKING:
    from benchbase.backend import Batch
    from benchbase.decode.factory import Decoder

__all__ = ["CheckedParts", "EvaluationHead", "FamilyParts", "KitModel", "MissingPart", "QuantizedReference",
           "ReferenceStep", "Weights", "family_parts", "parts_of_family", "quantized_reference_of"]

Weights = Mapping[str, np.ndarray]


class EvaluationHead(Protocol):
    """Turns what ``predict()`` returned into texts and losses, the harness's way, for one evaluation."""

    def decode(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        """The evaluation decoder's texts for a predicted batch (``lengths``: valid output frames)."""

    def greedy(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        """Greedy texts (the training sentences the log shows every few batches)."""

    def losses(self, outputs: np.ndarray, batch: Batch) -> np.ndarray:
        """Each utterance's validation loss (float64), an impossible alignment counted as the spec pins."""


@dataclass(frozen=True)
class ReferenceStep:
    """The reference's view of one training step from given weights on a batch, with the bounds of
    one float32 computation (``benchbase.numerics.tolerances``)."""

    loss: float
    """The spec's mean loss over the batch, an impossible alignment counted as the spec pins."""
    losses: np.ndarray
    """Each utterance's loss (+inf where no alignment exists)."""
    loss_bound: float
    running: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Running statistics the step leaves, float64, by weight name: each normalization layer's
    "<layer>.mean" and "<layer>.variance" (``FamilyParts.normalization_layers``), and an
    int8-emulated model's activation ranges (``QuantizedReference.range_names``); empty without any."""
    running_bound: Mapping[str, np.ndarray] = field(default_factory=dict)
    running_momentum: float = 0.0
    """The share of a running statistic's old value that the step keeps."""


@dataclass(frozen=True)
class KitModel:
    """The family's small model for the conformance kit: fast enough for the float64 reference."""

    model: ModelSpec
    """With the dropout a run trains with (the kit's reference checks set it to 0)."""
    optimizer: OptimizerSpec


class QuantizedReference(Protocol):
    """What the conformance kit needs of a family's ``precision: int8-emulated`` beside the parts
    every family has: the scheme is ``QuantizationSpec``'s (``benchbase.numerics.quantization``),
    where a family quantizes and which ranges it keeps are its own. On an int8-emulated model the
    family's ``bounded_outputs`` and ``reference_step`` are its quantized reference: fake-quantized
    at every point ``model.quantization`` names, the step updating each range by its layer's input
    before quantizing with it and leaving the ranges in ``ReferenceStep.running``, their bounds
    those of the rounding model run through the quantized computation (a grid step it flips
    moves what follows)."""

    def range_names(self, model: ModelSpec) -> list[str]:
        """The activation ranges int8-emulated ``model`` keeps in its weight layout, in layer order
        ("<layer>.input_range", float32 scalars)."""

    def quantized_kernels(self, weights: Weights, model: ModelSpec) -> dict[str, np.ndarray]:
        """``weights`` (int8-emulated ``model``'s layout) with each weight matrix ``model.quantization``
        names fake-quantized, float32, the rest as they are: what the quantized model multiplies with."""


class FamilyParts(Protocol):
    loss_name: str
    """What the loss is called in a message ("CTC loss", "transducer loss")."""
    outputs_name: str
    """What ``predict()`` returns, in a message ("log-probabilities", "encoder projection")."""
    log_probability_outputs: bool
    """Whether ``predict()`` returns a log-softmax over its last axis on every valid frame."""
    quantized_reference: QuantizedReference | None
    """The family's int8-emulated reference, which the kit proves a backend's int8-emulated
    against; optional: a family without int8-emulated (``ModelSpec.quantizable_tensors`` empty)
    sets None or leaves it out (``quantized_reference_of``)."""

    def evaluation_head(self, model: ModelSpec, decoder: Decoder, weights: Callable[[], Weights]) -> EvaluationHead:
        """The head of one evaluation. ``decoder``: the workload's CTC-style decoder, for a family
        whose outputs are per-frame log-probabilities; ``weights``: the backend's exported weights,
        called at most once, by a family whose decoding needs them."""

    def output_width(self, model: ModelSpec) -> int:
        """The last dimension of what ``predict()`` returns."""

    def weight_layout(self, model: ModelSpec, feature_dimension: int) -> dict[str, tuple[int, ...]]:
        """The framework-neutral layout: every weight's name and shape."""

    def validate_weights(self, weights: Weights, model: ModelSpec, feature_dimension: int) -> None:
        """``BenchbaseError`` unless ``weights`` has exactly the layout's names and shapes."""

    def reference_outputs(self, weights: Weights, model: ModelSpec, features: np.ndarray,
                          feature_lengths: np.ndarray) -> np.ndarray:
        """What ``predict()`` must return for a padded batch on ``weights``, float64, by the NumPy reference."""

    def bounded_outputs(self, weights: Weights, model: ModelSpec, features: np.ndarray, feature_lengths: np.ndarray,
                        operand_roundoff: float, draws: int) -> tuple[np.ndarray, np.ndarray]:
        """``reference_outputs`` and, elementwise, the error model's rounding bound of each
        (``benchbase.numerics.tolerances``): one float32 side's, or a narrower operand type's."""

    def random_weights(self, model: ModelSpec, feature_dimension: int, seed: int) -> dict[str, np.ndarray]:
        """float32 weights in the layout, every array random (biases and running statistics too, so
        that a part a backend ignores shows), the same for the same seed."""

    def reference_step(self, weights: Weights, model: ModelSpec, batch: Batch) -> ReferenceStep:
        """One training pass of the reference on ``batch`` (no dropout): the loss and the running
        statistics it leaves, each with its float32 bound."""

    def reference_loss(self, weights: Weights, model: ModelSpec, batch: Batch) -> float:
        """``reference_step``'s loss alone, float64, without its bounds (one pass of the reference
        instead of one per rounding draw): the conformance kit differentiates it numerically to
        check the gradient a backend applies. Optional: without it the kit calls ``reference_step``."""

    def without_dropout(self, model: ModelSpec) -> ModelSpec:
        """``model`` with every dropout off, whatever its fields are called: the model of the kit's
        reference checks (the reference has no dropout)."""

    def normalization_layers(self, model: ModelSpec) -> list[str]:
        """The layers that keep running statistics ("<layer>.mean", "<layer>.variance"), in order."""

    def impossible_frames(self, model: ModelSpec, labels: int) -> int:
        """The most feature frames an utterance of ``labels`` labels may keep and still have no alignment."""

    def kit_model(self) -> KitModel:
        """The conformance kit's model of the family, with its optimizer."""

    def batch_flops(self, model: ModelSpec, feature_dimension: int, padded_frames: int, feature_lengths: np.ndarray,
                    label_lengths: np.ndarray) -> tuple[int, int]:
        """A training batch's (padded, valid) FLOPs by the family's cost model: every row at the
        batch's ``padded_frames`` and longest label, and every row at its own lengths; training is
        the forward count times the family's ``TRAINING_FACTOR``. Optional: without it a run's
        FLOPs and MFU are "not known"."""


def quantized_reference_of(parts: FamilyParts) -> QuantizedReference | None:
    """The family's int8-emulated reference; None for a family without int8-emulated."""
    return getattr(parts, "quantized_reference", None)


def family_parts(model: ModelSpec) -> FamilyParts:
    """The parts of ``model``'s family (imported on first use: a family may bring NumPy-heavy code);
    a one-line ``BenchbaseError`` when the module its spec names does not exist or has no ``PARTS``."""
    return _parts(type(model).parts_module or f"benchbase.families.{model.family}.parts", model.family)


def parts_of_family(family: str) -> FamilyParts:
    """The parts of the family named ``family`` (a plugin's included); ``BenchbaseError`` if unknown."""
    try:
        spec_class = model_spec_class(family)
    except ValueError as error:
        raise BenchbaseError(str(error)) from None
    return _parts(spec_class.parts_module or f"benchbase.families.{family}.parts", family)


class MissingPart(BenchbaseError, AttributeError):
    """A family's parts lack a member that the caller needs: one line naming it (an AttributeError
    too, so that ``getattr(parts, name, default)`` still finds an optional member absent)."""


class CheckedParts:
    """A family's parts whose missing member is a ``MissingPart`` naming it and the family, not an
    AttributeError from deep inside the caller (the conformance kit reads the parts through this)."""

    def __init__(self, parts: FamilyParts, family: str) -> None:
        self._parts, self._family = parts, family

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._parts, name)
        except AttributeError:
            raise MissingPart(f"model family {self._family!r}: its parts ({type(self._parts).__name__}) have no "
                              f"{name}, which FamilyParts requires") from None


def _parts(name: str, family: str) -> FamilyParts:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is None or not (name == error.name or name.startswith(error.name + ".")):
            raise  # the module exists and an import of its own failed: its traceback says where
        raise BenchbaseError(f"model family {family!r}: its parts module {name!r} is not installed") from None
    parts: FamilyParts | None = getattr(module, "PARTS", None)
    if parts is None:
        raise BenchbaseError(f"model family {family!r}: its parts module {name!r} has no PARTS")
    return parts
