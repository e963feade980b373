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
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec

if TYPE_CHECKING:
    from benchbase.backend import Batch
    from benchbase.decode.factory import Decoder

__all__ = ["EvaluationHead", "FamilyParts", "Weights", "family_parts"]

Weights = Mapping[str, np.ndarray]


class EvaluationHead(Protocol):
    """Turns what ``predict()`` returned into texts and losses, the harness's way, for one evaluation."""

    def decode(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        """The evaluation decoder's texts for a predicted batch (``lengths``: valid output frames)."""

    def greedy(self, outputs: np.ndarray, lengths: np.ndarray) -> list[str]:
        """Greedy texts (the training sentences the log shows every few batches)."""

    def losses(self, outputs: np.ndarray, batch: Batch) -> np.ndarray:
        """Each utterance's validation loss (float64), an impossible alignment counted as the spec pins."""


class FamilyParts(Protocol):
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


def family_parts(model: ModelSpec) -> FamilyParts:
    """The parts of ``model``'s family (imported on first use: a family may bring NumPy-heavy code);
    a one-line ``BenchbaseError`` when the module its spec names does not exist or has no ``PARTS``."""
    name = type(model).parts_module or f"benchbase.families.{model.family}.parts"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is None or not (name == error.name or name.startswith(error.name + ".")):
            raise  # the module exists and an import of its own failed: its traceback says where
        raise BenchbaseError(f"model family {model.family!r}: its parts module {name!r} is not installed") from None
    parts: FamilyParts | None = getattr(module, "PARTS", None)
    if parts is None:
        raise BenchbaseError(f"model family {model.family!r}: its parts module {name!r} has no PARTS")
    return parts
