"""Conformance rules on the first training step: the loss it returns, the running statistics it leaves.

Both compare one ``train_step`` from the kit's random weights, on the batch with an impossible
alignment, with the family's reference step (``FamilyParts.reference_step``). Why each rule exists:

- loss: the loss is what is optimized and what is logged: each utterance's negative
  log-likelihood under the family's loss (CTC, the transducer's), averaged over the batch, an
  impossible alignment counting zero.
- batchnorm_statistics (for families whose layers keep running statistics,
  ``FamilyParts.normalization_layers``): the running statistics decide every evaluation;
  frameworks differ in the momentum's meaning, in the variance they keep (biased or not) and in
  the frames they average over, and the spec pins each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from benchbase.families.parts import ReferenceStep
from benchbase.kit.core import ConformanceFailure, Kit
from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF

__all__ = ["check_batchnorm_statistics", "check_loss", "keeps_running_statistics", "largest_statistic_excess",
           "statistic_excess"]

STATISTICS = ("mean", "variance")


def check_loss(kit: Kit) -> str:
    """train_step's loss equals the reference's spec-pinned loss, impossible alignment included; the
    note says how close it came to the bound."""
    step = kit.first_step()
    reference, loss, name = step.reference, step.loss, kit.parts.loss_name
    if isinstance(loss, bool) or not isinstance(loss, float):
        raise ConformanceFailure("loss", f"train_step returned a {type(loss).__module__}.{type(loss).__name__}, "
                                 "expected a Python float")
    if not math.isfinite(loss):
        raise ConformanceFailure("loss", f"train_step returned {loss}, expected {reference.loss:.6g}: the batch "
                                 f"holds an impossible alignment ({_impossible_rows(kit)}), which the spec counts as "
                                 "zero loss")
    if not abs(loss - reference.loss) <= reference.loss_bound:
        raise ConformanceFailure("loss", f"train_step returned {loss:.6g}, the reference's mean {name} is "
                                 f"{reference.loss:.6g} (float32 rounding bound {reference.loss_bound:.3g})"
                                 f"{_loss_hint(kit, loss)}")
    return f"{abs(loss - reference.loss) / reference.loss_bound:.2g} of its bound" if reference.loss_bound else ""


def keeps_running_statistics(kit: Kit) -> bool:
    """Whether batchnorm_statistics applies: the family's model has layers with running statistics."""
    return bool(kit.parts.normalization_layers(kit.model))


def check_batchnorm_statistics(kit: Kit) -> None:
    """After one training step, every running mean and variance is the reference's."""
    step = kit.first_step()
    reference = step.reference
    momentum = reference.running_momentum
    for layer in kit.parts.normalization_layers(kit.model):
        for stat in STATISTICS:
            name = f"{layer}.{stat}"
            old = step.weights_before[name].astype(np.float64)
            new = np.asarray(step.weights_after[name], np.float64)
            running_excess, batch_excess = statistic_excess(old, new, reference.running[name],
                                                            reference.running_bound[name], momentum)
            if (running_excess > 0).any():
                channel = int(np.argmax(running_excess))
                expected, bound = reference.running[name][channel], reference.running_bound[name][channel]
                raise ConformanceFailure("batchnorm_statistics", f"{name} after one train_step is off the "
                                         f"reference's running statistic by {abs(new[channel] - expected):.3g} in "
                                         f"channel {channel} (float32 rounding bound {bound:.3g})")
            if (batch_excess > 0).any():
                _fail_batch_statistic(layer, stat, momentum, old, new, reference.running[name], batch_excess)


def statistic_excess(old: np.ndarray, new: np.ndarray, expected: np.ndarray, bound: np.ndarray,
                     momentum: float) -> tuple[np.ndarray, np.ndarray]:
    """How far a running statistic after one step lies outside its bound, and how far the batch
    statistic recovered from it, (new - momentum x old) / (1 - momentum), lies outside that
    bound divided by (1 - momentum): positive entries fail. The recovered statistic is
    1 / (1 - momentum) times more sensitive than the running one (100x at momentum 0.99), which
    is what tells the biased variance from the unbiased one."""
    allowed = bound + _update_rounding(new, old)
    batch = (expected - momentum * old) / (1 - momentum)
    implied = (new - momentum * old) / (1 - momentum)
    return np.abs(new - expected) - allowed, np.abs(implied - batch) - allowed / (1 - momentum)


def largest_statistic_excess(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray], layers: list[str],
                             reference: ReferenceStep) -> float:
    """The largest ``statistic_excess`` of any running statistic of ``layers`` after one training
    step from ``before`` to ``after`` (running or recovered batch statistic), against the
    reference's step: positive fails. For tests of a backend's data-parallel modes, where no Kit
    builds the backend."""
    worst = -np.inf
    for name in (f"{layer}.{stat}" for layer in layers for stat in STATISTICS):
        excesses = statistic_excess(np.asarray(before[name], np.float64), np.asarray(after[name], np.float64),
                                    reference.running[name], reference.running_bound[name],
                                    reference.running_momentum)
        worst = max(worst, *(float(excess.max()) for excess in excesses))
    return worst


def _fail_batch_statistic(layer, stat, momentum, old, new, expected, excess) -> None:
    """The statistic folded in, recovered from the update (see ``statistic_excess``)."""
    channel = int(np.argmax(excess))
    implied = (new - momentum * old) / (1 - momentum)
    batch = (expected - momentum * old) / (1 - momentum)
    raise ConformanceFailure("batchnorm_statistics", f"the batch {stat} {layer} folded into its running {stat} is "
                             f"{implied[channel]:.6g} in channel {channel}, the reference's is {batch[channel]:.6g} "
                             f"({_statistic_hint(stat, implied, batch)}per channel over every frame of the padded "
                             "batch, biased variance, running = momentum x running + (1 - momentum) x batch with "
                             f"momentum {momentum})")


def _update_rounding(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """momentum x old + (1 - momentum) x batch in float32: two products, a sum and the store,
    each one rounding of the running value's magnitude."""
    return 4 * FLOAT32_UNIT_ROUNDOFF * np.maximum(np.abs(new), np.abs(old))


def _statistic_hint(stat: str, implied: np.ndarray, batch: np.ndarray) -> str:
    if stat != "variance":
        return ""
    ratio = float(np.median(implied / batch))
    if ratio > 1 and abs(ratio - 1) < 0.05:
        return f"about {ratio:.5f} times it: the unbiased variance? expected: "
    return "expected: "


def _impossible_rows(kit: Kit) -> str:
    batch, losses = kit.data.impossible_batch, kit.first_step().reference.losses
    return ", ".join(f"row {row}: {batch.label_lengths[row]} labels in {batch.output_lengths[row]} output frames"
                     for row in np.flatnonzero(np.isinf(losses)))


def _loss_hint(kit: Kit, loss: float) -> str:
    """Names the common wrong reduction the loss matches, if it matches one."""
    batch, reference = kit.data.impossible_batch, kit.first_step().reference
    possible = np.isfinite(reference.losses)
    zeroed = np.where(possible, reference.losses, 0.0)
    candidates = {
        "the mean over the possible utterances only (an impossible one must count as zero)":
            zeroed.sum() / max(possible.sum(), 1),
        "the mean of each loss divided by its label length (PyTorch's reduction='mean')":
            (zeroed / batch.label_lengths).mean(),
        "the sum over the batch (it must be divided by the batch size)": zeroed.sum(),
    }
    for description, value in candidates.items():
        if abs(loss - value) <= reference.loss_bound:
            return f"; it matches {description}"
    return ""
