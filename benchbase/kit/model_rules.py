"""Conformance rules about the model: its size, its weights, its outputs, its loss, its BatchNorm.

Every rule is written once against the model family's parts (``benchbase.families.parts``): its
weight layout, its NumPy reference and that reference's float32 bounds. Why each rule exists:

- parameter_count: the spec fixes the architecture, so every backend must build exactly the
  parameters ``ModelSpec.parameter_count`` implies (a framework's extra LSTM bias, a conv
  bias, a missing BatchNorm would all change what is trained), and export them under
  benchbase's names and shapes, since every other model rule reads them that way.
- weight_round_trip: the reference checks set a backend's weights; that only proves
  something if the weights that come back are exactly those that went in (a transposed
  gate block or a dropped running variance shows here), and if weights that do not fit are
  refused instead of silently broadcast or ignored.
- predict_shapes: the harness decodes predict()'s output without knowing the framework, so
  the dtype, shape (and, for log-probabilities, normalization) must be exactly the contract's,
  also for a smaller last batch; and predicting must change nothing a later call sees: the
  weights, BatchNorm's statistics, the dropout random state.
- forward_parity: the same weights must give the same outputs as the family's float64 NumPy
  reference (the pinned layers, activations, gate order, inference-time BatchNorm); otherwise
  two backends would not train the same model.

The rules on the first training step (loss, batchnorm_statistics) are in ``step_rules``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from benchbase.errors import BenchbaseError
from benchbase.families.layout import differing_weights
from benchbase.kit.core import ConformanceFailure, Kit, describe_difference, describe_error
from benchbase.kit.outputs import check_outputs, valid_frames
from benchbase.numerics.tolerances import INJECTION_DRAWS, same_kernels

__all__ = [
    "check_forward_parity",
    "check_layout",
    "check_parameter_count",
    "check_predict_shapes",
    "check_weight_round_trip",
    "expect_same_weights",
]

# Every tolerance below comes from benchbase.numerics.tolerances' error model: the family's
# reference computes, elementwise, how far one float32 computation of each value may land from it.


def check_parameter_count(kit: Kit) -> None:
    """Trainable parameters and the exported layout of the kit's model as the spec has it."""
    spec, dimension = kit.data.spec_model, kit.data.feature_dimension
    with kit.backend(model=spec) as backend:
        count = backend.parameter_count()
        weights = backend.export_weights()
    expected = spec.parameter_count(dimension)
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count != expected:
        raise ConformanceFailure("parameter_count", f"parameter_count() returned {count!r}, the {kit.family} spec "
                                 f"implies {expected:,} for {dimension} input features ({_architecture(spec)})")
    check_layout("parameter_count", weights, kit.parts.weight_layout(spec, dimension))


def check_weight_round_trip(kit: Kit) -> str | None:
    """import_weights then export_weights gives the same arrays, as copies; misfits are refused."""
    weights = kit.parity_weights()
    with kit.backend() as backend:
        backend.import_weights(weights)
        exported = backend.export_weights()
        check_layout("weight_round_trip", exported, kit.parts.weight_layout(kit.model, kit.data.feature_dimension))
        expect_same_weights(weights, exported, "export_weights() after import_weights()")
        _scribble(exported)
        expect_same_weights(weights, backend.export_weights(), "export_weights() after its last result was "
                            "overwritten (it must return copies)")
        return _expect_refusals(backend, weights)


def check_predict_shapes(kit: Kit) -> None:
    """predict()'s type and shape (and normalization) for a batch with a short, padded row and a
    smaller batch; predicting twice gives the same; no weight and no later training step changes."""
    full, small, spec = kit.data.impossible_batch.inputs(), kit.data.small_inputs, kit.data.spec_model
    batch = kit.data.batches[0]
    with kit.backend(model=spec) as backend:  # dropout on: predicting must not draw from its generator
        before = backend.export_weights()
        first = check_outputs("predict_shapes", backend.predict(full), full, kit)
        check_outputs("predict_shapes", backend.predict(small), small, kit)
        again = check_outputs("predict_shapes", backend.predict(full), full, kit)
        changed = differing_weights(before, backend.export_weights())
        loss_after_predicting = backend.train_step(batch)
    with kit.backend(model=spec) as fresh:
        loss = fresh.train_step(batch)
    if not np.array_equal(first, again):
        worst, where = describe_difference(again, first)
        raise ConformanceFailure("predict_shapes", f"predict() is not deterministic (dropout on?): the same inputs "
                                 f"twice gave {kit.parts.outputs_name} up to {worst:.3g} apart ({where}); predict "
                                 "must run the model in inference mode, without dropout")
    if changed:
        raise ConformanceFailure("predict_shapes", f"predict() changed the weights {', '.join(changed[:6])}; "
                                 "inference must use BatchNorm's running statistics and leave them as they are")
    if not abs(loss_after_predicting - loss) <= same_kernels(loss):
        raise ConformanceFailure("predict_shapes", f"the first train_step after three predict() calls returned "
                                 f"{loss_after_predicting:.7g}, without them {loss:.7g} (the same seed and batch): "
                                 "predict must leave the dropout random state as it is")


def check_forward_parity(kit: Kit) -> str:
    """predict() on random weights matches the family's reference (inference mode) on every valid
    frame, element by element within one float32 side's rounding bound there; the note says how
    close the closest element came."""
    weights = kit.parity_weights()
    probes = (kit.data.impossible_batch.inputs(), kit.data.small_inputs)
    with kit.backend() as backend:
        backend.import_weights(weights)
        found = [check_outputs("forward_parity", backend.predict(inputs), inputs, kit) for inputs in probes]
    closest = 0.0
    for inputs, outputs in zip(probes, found):
        exact, bound = kit.parts.bounded_outputs(weights, kit.model, inputs.features, inputs.feature_lengths,
                                                 operand_roundoff=0.0, draws=INJECTION_DRAWS)
        frames = int(inputs.output_lengths.max(initial=0))
        difference = np.abs(outputs[:, :frames] - exact[:, :frames])
        valid = np.broadcast_to(valid_frames(inputs, frames), difference.shape)
        excess = np.where(valid, difference - bound[:, :frames], -np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero bound: the excess above decides
            closest = max(closest, float(np.max(np.where(valid & (bound[:, :frames] > 0),
                                                         difference / bound[:, :frames], 0.0), initial=0.0)))
        if (excess > 0).any():
            index = np.unravel_index(np.argmax(excess), excess.shape)
            last = "symbol" if kit.parts.log_probability_outputs else "unit"
            raise ConformanceFailure("forward_parity", f"predict() differs from the reference by "
                                     f"{difference[index]:.3g} at {tuple(map(int, index))} [row, frame, {last}] of "
                                     f"a batch of {inputs.size} ({kit.parts.outputs_name}): found "
                                     f"{outputs[index]:.6g}, expected {exact[index]:.6g} (float32 rounding bound "
                                     f"there {bound[index]:.3g})")
    return f"closest element at {closest:.2g} of its bound"


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


def expect_same_weights(expected: Mapping[str, np.ndarray], found: Mapping[str, np.ndarray], what: str) -> None:
    changed = differing_weights(expected, found)
    if changed:
        worst, where = describe_difference(found[changed[0]], expected[changed[0]])
        raise ConformanceFailure("weight_round_trip", f"{what} differs from the imported weights in "
                                 f"{', '.join(changed[:6])}; {changed[0]} by up to {worst:.3g} {where}")


def _architecture(spec) -> str:
    """The spec's architecture fields, for a message (the family's own fields, not the common ones)."""
    common = {"family", "dropout", "precision", "quantization", "symbols"}
    fields = {name: value for name, value in spec.model_dump().items() if name not in common and
              isinstance(value, int | str) and not isinstance(value, bool)}
    return ", ".join(f"{name} {value}" for name, value in list(fields.items())[:8])


def _scribble(weights: Mapping[str, np.ndarray]) -> None:
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
    return "refused with exceptions other than BenchbaseError (" + "; ".join(loose) + ")" if loose else None


def _unfitting(weights: Mapping[str, np.ndarray]) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """Weights a backend must refuse, read off the layout: one missing, one matrix transposed
    (the last one that is not square: the output layer's), one name too many, one matrix a
    column short (the first one: the input layer's)."""
    names = list(weights)
    matrices = [name for name in names if weights[name].ndim >= 2 and weights[name].shape[0] != weights[name].shape[-1]]
    yield f"without {names[-1]!r}", {name: array for name, array in weights.items() if name != names[-1]}
    if matrices:
        last = matrices[-1]
        yield f"with {last} transposed", {**weights, last: np.swapaxes(weights[last], 0, -1).copy()}
    unknown = f"{names[0].rpartition('.')[0] or names[0]}.unknown_extra"
    yield f"with an unknown name {unknown!r}", {**weights, unknown: np.zeros(weights[names[-1]].shape, np.float32)}
    if matrices:
        first = matrices[0]
        narrower = weights[first][..., :-1].copy()
        yield f"with {first} of shape {narrower.shape}", {**weights, first: narrower}
