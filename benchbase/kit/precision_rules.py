"""The kit's rules for a precision other than fp32: what `benchbase backend-test NAME --precision P` proves.

fp32 is all a backend must implement, so the kit's rules (``RULES``) run in fp32; a backend that
declares another precision for a family (``Capabilities.precisions_of``)
can be proved in it with these. int8-emulated is the one whose numbers a reference fixes: the
fake quantization is bit for bit the shared scheme's (``benchbase.numerics.quantization``), and
the error model bounds how far a grid step flipped by a rounding carries (``benchbase.kit.int8``).
Its rules are written once, over the family's parts: they apply to every family whose parts have a
``quantized_reference`` (``benchbase.families.parts``), a plugin's included. Mixed precisions
(bf16, fp16) have tolerances from the error model too, but run on GPUs where they matter; the
backends' own tests check them on the kit's data.

Why each rule exists:

- int8_forward: predict() of an int8-emulated model on random weights and ranges is the
  quantized reference's within the flip bound, and its median difference within float32's own
  (a backend that skipped an input or kernel quantizer is far beyond it). A skipped h(t-1)
  quantizer moves values by less than a grid step, which the next layer's input quantizer
  mostly snaps back: only the ranges of the next rule show it.
- int8_training_step: the loss of one training step and the activation ranges it leaves (from
  zero: the first step sets them; and moving) are the reference's; a range updated after
  quantizing instead of before, or one taken over padding the spec excludes, shows here.
- int8_checkpoint: a checkpoint keeps every range, so a resumed run quantizes as it did.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from benchbase.kit.core import ConformanceFailure, Kit
from benchbase.kit.int8 import (
    QuantizedForward,
    flip_bound,
    in_precision,
    median_bound,
    quantized_forward,
    quantized_reference,
    quantized_training_step,
    range_update_rounding,
)
from benchbase.numerics.quantization import INT8_EMULATED
from benchbase.numerics.tolerances import BOTH_SIDES, same_kernels

__all__ = ["check_int8_checkpoint", "check_int8_forward", "check_int8_training_step"]


def check_int8_forward(kit: Kit) -> None:
    """The int8-emulated outputs of predict() against the quantized reference."""
    _expect_within_flips("int8_forward", kit.parts.outputs_name, quantized_forward(kit.backend_class, kit.data))


def check_int8_training_step(kit: Kit) -> None:
    """The loss of one int8 training step and the ranges it leaves, from zero ranges and from stored ones."""
    for first in (True, False):
        step = quantized_training_step(kit.backend_class, kit.data, first=first)
        if not abs(step.loss - step.expected_loss) <= BOTH_SIDES * step.loss_bound:
            raise ConformanceFailure("int8_training_step", f"train_step returned {step.loss:.6g}, the "
                                     f"quantized reference's {kit.parts.loss_name} is {step.expected_loss:.6g} "
                                     f"(bound {BOTH_SIDES * step.loss_bound:.3g}, {_start(first)})")
        _expect_ranges("int8_training_step", step.ranges, step.expected_ranges, step.range_bounds, first)


def check_int8_checkpoint(kit: Kit) -> None:
    """A checkpoint of an int8-emulated model after one step keeps its ranges and its predictions."""
    model = in_precision(kit.model, INT8_EMULATED)
    names = quantized_reference(model).range_names(model)
    with tempfile.TemporaryDirectory() as folder, kit.backend(model=model) as backend:
        path = Path(folder) / "checkpoint"
        loss = backend.train_step(kit.data.batches[0])
        backend.save_checkpoint(path)
        saved, outputs = backend.export_weights(), backend.predict(kit.data.small_inputs)
        with kit.backend(seed=kit.seed + 5, model=model) as restored:
            restored.load_checkpoint(path)
            weights, again = restored.export_weights(), restored.predict(kit.data.small_inputs)
    if not np.isfinite(loss):
        raise ConformanceFailure("int8_checkpoint", f"an int8-emulated train_step returned {loss}")
    unset = [name for name in names if not saved[name] > 0]
    if unset:
        raise ConformanceFailure("int8_checkpoint", f"after a training step the ranges {', '.join(unset)} "
                                 "are still 0 (the first step sets each to its input's max|x|)")
    lost = [name for name in names if weights[name] != saved[name]]
    if lost:
        raise ConformanceFailure("int8_checkpoint", f"a loaded checkpoint changed the ranges {', '.join(lost)}")
    if not np.abs(again - outputs).max() <= same_kernels(outputs):
        raise ConformanceFailure("int8_checkpoint", f"the loaded checkpoint predicts up to "
                                 f"{np.abs(again - outputs).max():.3g} away from the saved backend")


def _expect_within_flips(rule: str, what: str, result: QuantizedForward) -> None:
    mask = np.broadcast_to(result.mask, result.found.shape)
    difference = np.abs(result.found - result.expected)[mask]
    if difference.max() > flip_bound(result):
        index = np.unravel_index(np.argmax(np.where(mask, np.abs(result.found - result.expected), -1)),
                                 result.found.shape)
        raise ConformanceFailure(rule, f"the int8-emulated {what} differs from the quantized reference by "
                                 f"{difference.max():.3g} at {tuple(map(int, index))}, beyond the farthest a "
                                 f"flipped grid step carries ({flip_bound(result):.3g})")
    if np.median(difference) > median_bound(result):
        raise ConformanceFailure(rule, f"the int8-emulated {what}'s median difference from the quantized "
                                 f"reference is {np.median(difference):.3g}, beyond float32's own "
                                 f"({median_bound(result):.3g}): is every tensor the spec names quantized?")


def _expect_ranges(rule: str, found: dict[str, float], expected: dict[str, float], bound: dict[str, float],
                   first: bool) -> None:
    missing = sorted(set(expected) - set(found))
    if missing:
        raise ConformanceFailure(rule, f"export_weights() has no {', '.join(missing)} after a training step")
    for name, value in expected.items():
        allowed = bound[name] + range_update_rounding(value)
        if not abs(found[name] - value) <= allowed:
            raise ConformanceFailure(rule, f"{name} is {found[name]:.7g} after one step ({_start(first)}), the "
                                     f"reference's {value:.7g} (bound {allowed:.3g})")


def _start(first: bool) -> str:
    return "from zero ranges" if first else "from stored ranges"
