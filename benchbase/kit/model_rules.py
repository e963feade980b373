"""Conformance rules about the model: its size, its weights, its outputs, its loss, its BatchNorm.

Why each rule exists:

- parameter_count: the spec fixes the architecture, so every backend must build exactly the
  parameters ``ModelSpec.parameter_count`` implies (a framework's extra LSTM bias, a conv
  bias, a missing BatchNorm would all change what is trained), and export them under
  benchbase's names and shapes, since every other model rule reads them that way.
- weight_round_trip: the reference checks set a backend's weights; that only proves
  something if the weights that come back are exactly those that went in (a transposed
  gate block or a dropped running variance shows here), and if weights that do not fit are
  refused instead of silently broadcast or ignored.
- predict_shapes: the harness decodes predict()'s output without knowing the framework, so
  the dtype, shape and normalization must be exactly the contract's, also for a
  smaller last batch, and predicting must not change anything a later call sees.
- forward_parity: the same weights must give the same log-probabilities as benchbase's
  float64 NumPy reference (the pinned convolution, activation, gate order and inference-time
  BatchNorm); otherwise two backends would not train the same model.
- ctc_loss: the loss is what is optimized and what is logged: each utterance's CTC
  negative log-likelihood, averaged over the batch, an impossible alignment counting zero.
- batchnorm_statistics: BatchNorm's running statistics decide every evaluation; frameworks
  differ in the momentum's meaning, in the variance they keep (biased or not) and in the
  frames they average over, and the spec pins each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from benchbase.backend import Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.ds2.reference import BoundedReference, batchnorm_names, bounded_reference
from benchbase.families.ds2.weight_layout import weight_layout
from benchbase.families.layout import differing_weights
from benchbase.kit.core import ConformanceFailure, Kit, describe_difference, describe_error
from benchbase.numerics.tolerances import (
    ELEMENTWISE_ULPS,
    FLOAT32_UNIT_ROUNDOFF,
    accumulation_bound,
)

__all__ = [
    "check_batchnorm_statistics",
    "check_ctc_loss",
    "check_forward_parity",
    "check_parameter_count",
    "check_predict_shapes",
    "check_prediction",
    "check_weight_round_trip",
    "largest_statistic_excess",
    "normalization_bound",
    "statistic_excess",
]

# Every tolerance below comes from benchbase.numerics.tolerances' error model: the reference
# computes, elementwise, how far one float32 computation of each value may land from it.


def check_parameter_count(kit: Kit) -> None:
    """Trainable parameters and the exported layout of the workload's model as the spec has it."""
    spec, dimension = kit.data.spec_model, kit.data.feature_dimension
    with kit.backend(model=spec) as backend:
        count = backend.parameter_count()
        weights = backend.export_weights()
    expected = spec.parameter_count(dimension)
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count != expected:
        raise ConformanceFailure("parameter_count", f"parameter_count() returned {count!r}, the spec implies "
                                 f"{expected:,} ({spec.lstm_layers} LSTM layers x {spec.lstm_units} units, "
                                 f"conv {spec.conv_width}x{dimension}->{spec.conv_channels})")
    check_layout("parameter_count", weights, weight_layout(spec, dimension))


def check_weight_round_trip(kit: Kit) -> str | None:
    """import_weights then export_weights gives the same arrays; weights that do not fit are refused."""
    weights = kit.parity_weights()
    with kit.backend() as backend:
        backend.import_weights(weights)
        exported = backend.export_weights()
        check_layout("weight_round_trip", exported, weight_layout(kit.model, kit.data.feature_dimension))
        expect_same_weights(weights, exported, "export_weights() after import_weights()")
        scribble(exported)
        expect_same_weights(weights, backend.export_weights(), "export_weights() after its last result was "
                             "overwritten (it must return copies)")
        return _expect_refusals(backend, weights)


def check_predict_shapes(kit: Kit) -> None:
    """predict()'s types, shapes, normalization and lengths; a smaller batch; no state change."""
    full, small = kit.data.impossible_batch.inputs(), kit.data.small_inputs  # with a short, padded row
    symbols = kit.model.symbols
    with kit.backend() as backend:
        before = backend.export_weights()
        first = check_prediction("predict_shapes", backend.predict(full), full, symbols)
        check_prediction("predict_shapes", backend.predict(small), small, symbols)
        again = check_prediction("predict_shapes", backend.predict(full), full, symbols)
        changed = differing_weights(before, backend.export_weights())
    if not np.array_equal(first, again):
        worst, where = describe_difference(again, first)
        raise ConformanceFailure("predict_shapes", f"predicting the same inputs twice gave different "
                                 f"log-probabilities (by up to {worst:.3g}, {where}); predict must not change state")
    if changed:
        raise ConformanceFailure("predict_shapes", f"predict() changed the weights {', '.join(changed[:6])}; "
                                 "inference must use BatchNorm's running statistics and leave them as they are")


def check_forward_parity(kit: Kit) -> None:
    """predict() on random weights matches the NumPy reference (inference mode) on every valid frame."""
    weights = kit.parity_weights()
    probes = (kit.data.impossible_batch.inputs(), kit.data.small_inputs)
    with kit.backend() as backend:
        backend.import_weights(weights)
        found = [check_prediction("forward_parity", backend.predict(inputs), inputs, kit.model.symbols)
                 for inputs in probes]
    for inputs, log_probs in zip(probes, found):
        reference = bounded_reference(weights, kit.model, inputs.features, inputs.feature_lengths, training=False)
        frames = reference.log_probs.shape[1]
        excess = np.abs(log_probs[:, :frames] - reference.log_probs) - reference.log_probs_bound
        excess = np.where(valid_frames(inputs, frames), excess, -np.inf)
        if (excess > 0).any():
            index = np.unravel_index(np.argmax(excess), excess.shape)
            raise ConformanceFailure("forward_parity", f"log-probabilities differ from the reference by "
                                     f"{abs(log_probs[index] - reference.log_probs[index]):.3g} "
                                     f"at {tuple(map(int, index))} "
                                     f"[row, frame, symbol] of a batch of {inputs.size}: found {log_probs[index]:.6g}, "
                                     f"expected {reference.log_probs[index]:.6g} (float32 rounding bound there "
                                     f"{reference.log_probs_bound[index]:.3g})")


def check_ctc_loss(kit: Kit) -> None:
    """train_step's loss equals the reference's spec-pinned CTC loss, impossible alignment included."""
    step = kit.first_step()
    batch = kit.data.impossible_batch
    loss = step.loss
    if isinstance(loss, bool) or not isinstance(loss, float):
        raise ConformanceFailure("ctc_loss", f"train_step returned a {type(loss).__module__}.{type(loss).__name__}, "
                                 "expected a Python float")
    if not math.isfinite(loss):
        raise ConformanceFailure("ctc_loss", f"train_step returned {loss}, expected {step.reference_loss:.6g}: the "
                                 f"batch holds an impossible alignment ({_impossible_rows(batch)}), which "
                                 "the spec counts as zero loss")
    if not abs(loss - step.reference_loss) <= step.reference_loss_bound:
        raise ConformanceFailure("ctc_loss", f"train_step returned {loss:.6g}, the reference's loss is "
                                 f"{step.reference_loss:.6g} (float32 rounding bound {step.reference_loss_bound:.3g})"
                                 f"{_loss_hint(kit, loss)}")


def check_batchnorm_statistics(kit: Kit) -> None:
    """After one training step, every running mean and variance is the reference's."""
    step = kit.first_step()
    momentum = kit.model.batchnorm_momentum
    for prefix in batchnorm_names(kit.model):
        old = {stat: step.weights_before[f"{prefix}.{stat}"].astype(np.float64) for stat in ("mean", "variance")}
        new = {stat: np.asarray(step.weights_after[f"{prefix}.{stat}"], np.float64) for stat in ("mean", "variance")}
        expected = {stat: step.reference_running[f"{prefix}.{stat}"] for stat in ("mean", "variance")}
        bound = {stat: step.reference_running_bound[f"{prefix}.{stat}"] for stat in ("mean", "variance")}
        batch = {stat: (expected[stat] - momentum * old[stat]) / (1 - momentum) for stat in expected}
        for stat in ("mean", "variance"):
            _check_running(prefix, stat, new[stat], expected[stat], bound[stat], old[stat])
            _check_batch_statistic(prefix, stat, momentum, old[stat], new[stat], batch[stat], bound[stat])


def check_layout(rule: str, weights: object, layout: Mapping[str, tuple[int, ...]]) -> None:
    """Names, shapes and dtype of exported weights are exactly the framework-neutral layout."""
    if not isinstance(weights, Mapping):
        raise ConformanceFailure(rule, f"export_weights() returned a {type(weights).__name__}, expected a mapping "
                                 "of names to arrays")
    missing = [name for name in layout if name not in weights]
    extra = [name for name in weights if name not in layout]
    if missing or extra:
        raise ConformanceFailure(rule, f"export_weights() names differ from weight_layout(): missing "
                                 f"{missing or 'none'}, unexpected {extra or 'none'}")
    for name, shape in layout.items():
        array = weights[name]
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.shape != shape:
            found = f"{type(array).__name__} {getattr(array, 'dtype', '?')} {getattr(array, 'shape', '?')}"
            raise ConformanceFailure(rule, f"export_weights()[{name!r}] is {found}, expected float32 numpy {shape}")


def check_prediction(rule: str, result: object, inputs: Inputs, symbols: int) -> np.ndarray:
    """predict()'s result has the contract's form; returns its log-probabilities."""
    if isinstance(result, tuple):
        raise ConformanceFailure(rule, "predict() returned a tuple, as backend contract 2 did; contract 3 returns "
                                 "the log-probabilities only (the output lengths are the harness's)")
    log_probs = result
    longest = int(inputs.output_lengths.max())
    if not isinstance(log_probs, np.ndarray) or log_probs.dtype != np.float32 or log_probs.ndim != 3 \
            or log_probs.shape[0] != inputs.size or log_probs.shape[1] < longest or log_probs.shape[2] != symbols:
        found = f"{type(log_probs).__name__} {getattr(log_probs, 'dtype', '?')} {getattr(log_probs, 'shape', '?')}"
        raise ConformanceFailure(rule, f"log_probs is {found}, expected float32 numpy ({inputs.size}, at least "
                                 f"{longest} frames, {symbols} symbols)")
    _check_normalized(rule, log_probs, inputs)
    return log_probs


def valid_frames(inputs: Inputs, frames: int) -> np.ndarray:
    """(batch, frames, 1): True on each utterance's output frames, False on padding."""
    return (np.arange(frames)[None, :] < inputs.output_lengths[:, None])[:, :, None]


def _check_normalized(rule: str, log_probs: np.ndarray, inputs: Inputs) -> None:
    frames = int(inputs.output_lengths.max())
    mask = valid_frames(inputs, frames)[:, :, 0]
    values = log_probs[:, :frames].astype(np.float64)
    if not np.isfinite(values[mask]).all():
        raise ConformanceFailure(rule, "log_probs holds NaN or infinite values on valid frames")
    totals = np.log(np.exp(values).sum(axis=-1))
    worst, where = describe_difference(totals, np.zeros_like(totals), mask)
    allowed = normalization_bound(values[mask])
    if worst > allowed:
        raise ConformanceFailure(rule, f"a valid frame's probabilities do not sum to one: logsumexp is off by "
                                 f"{worst:.3g} {where} [row, frame] (float32 rounding bound {allowed:.3g}); "
                                 "expected a log-softmax over the symbols")


def normalization_bound(log_probs: np.ndarray) -> float:
    """How far from 0 a float32 log-softmax's logsumexp may land: each log-probability carries
    a few roundings of the largest magnitude in its frame (the shift by the maximum, the exp,
    the log of the sum), the sum over the symbols gamma_S, and the log one more."""
    largest = float(np.abs(log_probs).max()) if log_probs.size else 0.0
    roundings = (ELEMENTWISE_ULPS + 2) * FLOAT32_UNIT_ROUNDOFF * largest
    return roundings + accumulation_bound(log_probs.shape[-1]) + ELEMENTWISE_ULPS * FLOAT32_UNIT_ROUNDOFF


def expect_same_weights(expected: Mapping[str, np.ndarray], found: Mapping[str, np.ndarray], what: str) -> None:
    changed = differing_weights(expected, found)
    if changed:
        worst, where = describe_difference(found[changed[0]], expected[changed[0]])
        raise ConformanceFailure("weight_round_trip", f"{what} differs from the imported weights in "
                                 f"{', '.join(changed[:6])}; {changed[0]} by up to {worst:.3g} {where}")


def scribble(weights: Mapping[str, np.ndarray]) -> None:
    for array in weights.values():
        if array.flags.writeable:
            array.fill(7.0)


def _expect_refusals(backend, weights: Mapping[str, np.ndarray]) -> str | None:
    """Every unfitting set of weights raises; returns a note when the exception is not a BenchbaseError."""
    loose = []
    for description, broken in _unfitting(weights):
        try:
            backend.import_weights(broken)
        except BenchbaseError:
            continue
        except Exception as error:  # noqa: BLE001  (refused, though not with the contract's error type)
            loose.append(f"{description}: {describe_error(error, method=False)}")
            continue
        raise ConformanceFailure("weight_round_trip", f"import_weights() accepted weights {description}; "
                                 "expected an exception")
    if loose:
        return "refused with exceptions other than BenchbaseError (" + "; ".join(loose) + ")"
    return None


def _unfitting(weights: Mapping[str, np.ndarray]):
    last = list(weights)[-1]
    yield f"without {last!r}", {name: array for name, array in weights.items() if name != last}
    yield "with output.kernel transposed", {**weights, "output.kernel": weights["output.kernel"].T.copy()}
    yield "with an unknown name 'conv.bias'", {**weights, "conv.bias": np.zeros(weights["conv.kernel"].shape[-1],
                                                                                  np.float32)}
    narrower = weights["lstm.0.input_kernel"][:, :-1].copy()
    yield f"with lstm.0.input_kernel of shape {narrower.shape}", {**weights, "lstm.0.input_kernel": narrower}


def _impossible_rows(batch) -> str:
    rows = [row for row in range(batch.size) if batch.output_lengths[row] < batch.label_lengths[row]]
    return ", ".join(f"row {row}: {batch.label_lengths[row]} labels in {batch.output_lengths[row]} output frames"
                     for row in rows)


def _loss_hint(kit: Kit, loss: float) -> str:
    """Names the common wrong reduction the loss matches, if it matches one."""
    batch, losses = kit.data.impossible_batch, kit.first_step().reference_losses
    possible = np.isfinite(losses)
    zeroed = np.where(possible, losses, 0.0)
    candidates = {
        "the mean over the possible utterances only (an impossible one must count as zero)":
            zeroed.sum() / possible.sum(),
        "the mean of each loss divided by its label length (PyTorch's reduction='mean')":
            (zeroed / batch.label_lengths).mean(),
        "the sum over the batch (it must be divided by the batch size)": zeroed.sum(),
    }
    for description, value in candidates.items():
        if abs(loss - value) <= kit.first_step().reference_loss_bound:
            return f"; it matches {description}"
    return ""


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


def largest_statistic_excess(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray], model,
                             reference: BoundedReference) -> float:
    """The largest ``statistic_excess`` of any BatchNorm statistic after one training step from
    ``before`` to ``after`` (running or recovered batch statistic), against the reference's
    training pass of that step (``bounded_step``): positive fails. For tests of a backend's
    data-parallel modes, where no Kit builds the backend."""
    worst = -np.inf
    for prefix in batchnorm_names(model):
        for stat in ("mean", "variance"):
            name = f"{prefix}.{stat}"
            excesses = statistic_excess(np.asarray(before[name], np.float64), np.asarray(after[name], np.float64),
                                        reference.running[name], reference.running_bound[name],
                                        model.batchnorm_momentum)
            worst = max(worst, *(float(excess.max()) for excess in excesses))
    return worst


def _check_running(prefix: str, stat: str, found: np.ndarray, expected: np.ndarray, bound: np.ndarray,
                   old: np.ndarray) -> None:
    excess = np.abs(found - expected) - (bound + _update_rounding(found, old))
    if (excess > 0).any():
        channel = int(np.argmax(excess))
        raise ConformanceFailure("batchnorm_statistics", f"{prefix}.{stat} after one train_step is off the "
                                 f"reference's running statistic by {abs(found[channel] - expected[channel]):.3g} "
                                 f"in channel {channel} (float32 rounding bound {bound[channel]:.3g})")


def _check_batch_statistic(prefix, stat, momentum, old, new, batch, bound) -> None:
    """The statistic folded in, recovered from the update (see ``statistic_excess``)."""
    implied = (new - momentum * old) / (1 - momentum)
    _, excess = statistic_excess(old, new, momentum * old + (1 - momentum) * batch, bound, momentum)
    if (excess > 0).any():
        channel = int(np.argmax(excess))
        raise ConformanceFailure("batchnorm_statistics", f"the batch {stat} {prefix} folded into its running "
                                 f"{stat} is {implied[channel]:.6g} in channel {channel}, the reference's is "
                                 f"{batch[channel]:.6g} ({_statistic_hint(stat, implied, batch)}per channel over "
                                 "every frame of the padded batch, biased variance, running = momentum x running "
                                 f"+ (1 - momentum) x batch with momentum {momentum})")


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
