"""Conformance rules of the RNN-T family (``benchbase.families.rnnt``): what a transducer backend must do.

A transducer backend's ``predict()`` returns the joint network's encoder projection, not
log-probabilities: the harness runs the prediction network, the joint and the greedy search
itself, on the weights the backend exports (docs/design.md, "Model families"). So the rules
check the encoder against the family's NumPy reference on the same weights, the transducer loss
``train_step`` optimizes, and that what ``predict()`` returns after training is what the exported
weights compute. Every bound is the error model's (``benchbase.numerics.tolerances``).

Why each rule exists:

- rnnt_parameter_count: the spec fixes the architecture (one bias per LSTM gate, an embedding
  row for the blank, a bias on both joint projections), and every other rule reads the weights
  by the family's names (``benchbase.families.rnnt.weight_layout``).
- rnnt_weight_round_trip: the reference checks set a backend's weights; that proves something
  only if what comes back is what went in (a transposed gate block shows), and misfits are refused.
- rnnt_predict_shapes: the harness searches on predict()'s output without knowing the
  framework: float32 (batch, frames, joint_units), and predicting changes nothing a later call
  sees (weights, the dropout generator).
- rnnt_forward_parity: the same weights give the same encoder projection (input stacking, time
  stacking, gate order, the projection's bias), element by element within float32's bound.
- rnnt_transducer_loss: the loss is what is optimized and logged: each utterance's negative
  log-likelihood summed and divided by the batch size, an utterance too short for any encoder
  frame counting zero.
- rnnt_prediction_matches_weights: after training, predict() must be what the backend's own
  exported weights compute (the harness asks the same at every evaluation: independent scoring).
- rnnt_seed_determinism and rnnt_checkpoint_round_trip: as DS2's rules, on the transducer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from benchbase.backend import Batch, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.layout import differing_weights
from benchbase.families.parts import family_parts
from benchbase.families.rnnt.bounds import BoundedLoss, bounded_transducer_loss
from benchbase.families.rnnt.reference import random_weights
from benchbase.families.rnnt.weight_layout import weight_layout
from benchbase.kit.core import ConformanceFailure, Kit, describe_error
from benchbase.kit.model_rules import check_layout, expect_same_weights, scribble, valid_frames
from benchbase.kit.training_rules import checkpoint_round_trip, prediction_matches_weights
from benchbase.numerics.tolerances import INJECTION_DRAWS, same_kernels

__all__ = [
    "check_encoded",
    "check_rnnt_checkpoint_round_trip",
    "check_rnnt_forward_parity",
    "check_rnnt_parameter_count",
    "check_rnnt_predict_shapes",
    "check_rnnt_prediction_matches_weights",
    "check_rnnt_transducer_loss",
    "check_rnnt_weight_round_trip",
    "parity_weights",
]


def check_rnnt_parameter_count(kit: Kit) -> None:
    """Trainable parameters and the exported layout of the kit's transducer as the spec has it."""
    spec, dimension = kit.data.spec_model, kit.data.feature_dimension
    with kit.backend(model=spec) as backend:
        count = backend.parameter_count()
        weights = backend.export_weights()
    expected = spec.parameter_count(dimension)
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count != expected:
        raise ConformanceFailure("rnnt_parameter_count", f"parameter_count() returned {count!r}, the spec implies "
                                 f"{expected:,} (encoder {spec.encoder_pre_layers} + {spec.encoder_post_layers} "
                                 f"LSTM layers x {spec.encoder_units} units, prediction {spec.prediction_layers} x "
                                 f"{spec.prediction_units}, joint {spec.joint_units}; one bias per LSTM gate)")
    check_layout("rnnt_parameter_count", weights, weight_layout(spec, dimension))


def check_rnnt_weight_round_trip(kit: Kit) -> str | None:
    """import_weights then export_weights gives the same arrays, as copies; misfits are refused."""
    weights = parity_weights(kit)
    with kit.backend() as backend:
        backend.import_weights(weights)
        exported = backend.export_weights()
        check_layout("rnnt_weight_round_trip", exported, weight_layout(kit.model, kit.data.feature_dimension))
        expect_same_weights(weights, exported, "export_weights() after import_weights()")
        scribble(exported)
        expect_same_weights(weights, backend.export_weights(), "export_weights() after its last result was "
                             "overwritten (it must return copies)")
        return _expect_refusals(backend, weights)


def check_rnnt_predict_shapes(kit: Kit) -> None:
    """predict()'s type and shape, for a batch with a row too short for any encoder frame and a
    smaller batch; predicting twice gives the same; no weight and no later training step changes."""
    full, small, spec = kit.data.impossible_batch.inputs(), kit.data.small_inputs, kit.data.spec_model
    width, batch = spec.joint_units, kit.data.batches[0]
    with kit.backend(model=spec) as backend:  # dropout on: predicting must not draw from its generator
        before = backend.export_weights()
        first = check_encoded("rnnt_predict_shapes", backend.predict(full), full, width)
        check_encoded("rnnt_predict_shapes", backend.predict(small), small, width)
        again = check_encoded("rnnt_predict_shapes", backend.predict(full), full, width)
        changed = differing_weights(before, backend.export_weights())
        loss_after_predicting = backend.train_step(batch)
    with kit.backend(model=spec) as fresh:
        loss = fresh.train_step(batch)
    if not np.array_equal(first, again):
        raise ConformanceFailure("rnnt_predict_shapes", f"predicting the same inputs twice gave encoder outputs "
                                 f"up to {np.abs(first - again).max():.3g} apart; predict must not change state")
    if changed:
        raise ConformanceFailure("rnnt_predict_shapes", f"predict() changed the weights {', '.join(changed[:6])}")
    if not abs(loss_after_predicting - loss) <= same_kernels(loss):
        raise ConformanceFailure("rnnt_predict_shapes", f"the first train_step after three predict() calls "
                                 f"returned {loss_after_predicting:.7g}, without them {loss:.7g} (the same seed and "
                                 "batch): predict must leave the dropout random state as it is")


def check_rnnt_forward_parity(kit: Kit) -> None:
    """predict() on random weights matches the reference encoder on every valid frame, element by
    element within one float32 side's rounding bound there (``bounded_outputs``)."""
    weights = parity_weights(kit)
    probes = (kit.data.impossible_batch.inputs(), kit.data.small_inputs)
    with kit.backend() as backend:
        backend.import_weights(weights)
        found = [check_encoded("rnnt_forward_parity", backend.predict(inputs), inputs, kit.model.joint_units)
                 for inputs in probes]
    for inputs, encoded in zip(probes, found):
        exact, bound = family_parts(kit.model).bounded_outputs(weights, kit.model, inputs.features,
                                                               inputs.feature_lengths, operand_roundoff=0.0,
                                                               draws=INJECTION_DRAWS)
        frames = int(inputs.output_lengths.max())
        difference = np.abs(encoded[:, :frames] - exact[:, :frames])
        excess = np.where(valid_frames(inputs, frames), difference - bound[:, :frames], -np.inf)
        if (excess > 0).any():
            index = np.unravel_index(np.argmax(excess), excess.shape)
            raise ConformanceFailure("rnnt_forward_parity", f"the encoder projection differs from the reference by "
                                     f"{difference[index]:.3g} at {tuple(map(int, index))} [row, frame, unit] of a "
                                     f"batch of {inputs.size}: found {encoded[index]:.6g}, expected "
                                     f"{exact[index]:.6g} (float32 rounding bound there {bound[index]:.3g})")


def check_rnnt_transducer_loss(kit: Kit) -> None:
    """The first train_step from the parity weights, on the batch with a row too short for any
    encoder frame, returns the reference's mean transducer loss within its rounding bound."""
    weights, batch = parity_weights(kit), kit.data.impossible_batch
    with kit.backend() as backend:
        backend.import_weights(weights)
        loss = backend.train_step(batch)
    reference = bounded_transducer_loss(weights, kit.model, batch)
    if isinstance(loss, bool) or not isinstance(loss, float):
        raise ConformanceFailure("rnnt_transducer_loss", f"train_step returned a {type(loss).__module__}."
                                 f"{type(loss).__name__}, expected a Python float")
    short = ", ".join(f"row {row}" for row in np.flatnonzero(batch.output_lengths == 0))
    if not math.isfinite(loss):
        raise ConformanceFailure("rnnt_transducer_loss", f"train_step returned {loss}, expected "
                                 f"{reference.loss:.6g}: {short} of the batch has no encoder frame, which the spec "
                                 "counts as zero loss (transducer_impossible_alignments)")
    if not abs(loss - reference.loss) <= reference.bound:
        raise ConformanceFailure("rnnt_transducer_loss", f"train_step returned {loss:.6g}, the reference's mean "
                                 f"transducer loss is {reference.loss:.6g} (float32 rounding bound "
                                 f"{reference.bound:.3g}){_loss_hint(loss, reference, batch)}")


def check_rnnt_prediction_matches_weights(kit: Kit) -> None:
    """After TRAINED_STEPS steps, predict() agrees with the reference encoder on the backend's own
    export_weights(), utterance by utterance (``benchbase.numerics.agreement``)."""
    width = kit.model.joint_units
    prediction_matches_weights(
        kit, "rnnt_prediction_matches_weights", "encoder projection",
        lambda result, inputs: check_encoded("rnnt_prediction_matches_weights", result, inputs, width),
        reference="reference encoder")


def check_rnnt_checkpoint_round_trip(kit: Kit) -> str | None:
    """DS2's checkpoint_round_trip on the transducer (whose predict() returns the encoder projection):
    save after 2 steps, load into a backend built with another seed, the same outputs and next
    losses (the optimizer's schedule included); a file of garbage is refused."""
    width = kit.data.spec_model.joint_units
    return checkpoint_round_trip(
        kit, lambda result, inputs: check_encoded("rnnt_checkpoint_round_trip", result, inputs, width))


def check_encoded(rule: str, result: object, inputs: Inputs, width: int) -> np.ndarray:
    """predict()'s result has the family's form: float32 (batch, frames >= the longest output
    length, joint_units), finite on valid frames. Returns it."""
    if isinstance(result, tuple):
        raise ConformanceFailure(rule, "predict() returned a tuple, as backend contract 2 did; contract 3 returns "
                                 "the outputs only (the output lengths are the harness's)")
    longest = int(inputs.output_lengths.max(initial=0))
    if not isinstance(result, np.ndarray) or result.dtype != np.float32 or result.ndim != 3 \
            or result.shape[0] != inputs.size or result.shape[1] < longest or result.shape[2] != width:
        found = f"{type(result).__name__} {getattr(result, 'dtype', '?')} {getattr(result, 'shape', '?')}"
        raise ConformanceFailure(rule, f"predict() returned {found}, expected the joint's encoder projection: "
                                 f"float32 numpy ({inputs.size}, at least {longest} frames, {width} joint units)")
    if not np.isfinite(result[:, :longest][valid_frames(inputs, longest)[:, :, 0]]).all():
        raise ConformanceFailure(rule, "predict() returned NaN or infinite values on valid frames")
    return result


def parity_weights(kit: Kit) -> dict[str, np.ndarray]:
    """Random weights in the family's layout (every bias random too), the same for every rule of a kit."""
    return random_weights(kit.model, kit.data.feature_dimension, np.random.default_rng(kit.seed + 1))


def _loss_hint(loss: float, reference: BoundedLoss, batch: Batch) -> str:
    """Names the common wrong reduction the loss matches, if it matches one."""
    possible = np.isfinite(reference.losses)
    zeroed = np.where(possible, reference.losses, 0.0)
    candidates = {
        "the mean over the utterances with an encoder frame only (one without must count as zero)":
            zeroed.sum() / max(possible.sum(), 1),
        "the mean of each loss divided by its label length": (zeroed / batch.label_lengths).mean(),
        "the sum over the batch (it must be divided by the batch size)": zeroed.sum(),
    }
    for description, value in candidates.items():
        if abs(loss - value) <= reference.bound:
            return f"; it matches {description}"
    return ""


# --- misfits import_weights must refuse ------------------------------------------------------------


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
        raise ConformanceFailure("rnnt_weight_round_trip", f"import_weights() accepted weights {description}; "
                                 "expected an exception")
    return "refused with exceptions other than BenchbaseError (" + "; ".join(loose) + ")" if loose else None


def _unfitting(weights: Mapping[str, np.ndarray]):
    def replaced(name: str, array: np.ndarray) -> dict[str, np.ndarray]:
        return {**weights, name: array}

    def transposed(name: str) -> tuple[str, dict[str, np.ndarray]]:
        return f"with {name} transposed", replaced(name, weights[name].T.copy())

    yield "without 'joint.output.bias'", {name: array for name, array in weights.items() if name != "joint.output.bias"}
    yield transposed("joint.output.kernel")
    yield "with an unknown name 'joint.output.scale'", replaced("joint.output.scale", weights["joint.output.bias"])
    narrower = weights["encoder.lstm.0.input_kernel"][:, :-1].copy()
    yield f"with encoder.lstm.0.input_kernel of shape {narrower.shape}", replaced("encoder.lstm.0.input_kernel",
                                                                                  narrower)
    yield transposed("prediction.lstm.0.recurrent_kernel")
