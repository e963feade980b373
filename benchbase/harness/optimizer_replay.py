"""The run's first training step replayed: the run trains with the optimizer settings its log states.

The log states the workload's optimizer and schedule, and the conformance kit's
``optimizer_update`` rule proves a backend applies them; this proves it in the run itself. Off the
clock, the harness exports the weights before the first step and after it; a twin of the backend,
built from the run's own context with a probe optimizer (``benchbase.optimizers.probe``), reads
the gradient that step applied at the weights before it, on the same (augmented) batch; the
spec's optimizer in float64 (``benchbase.optimizers.reference``, its state empty, step 0's
learning rate) must land on the weights after it, within the kit's bounds. A mismatch stops the
run (``OptimizerMismatch``), naming the setting it trains with where a common deviation fits.
The kit proves the gradient against the float64 loss; the run proves the settings, so the
gradient is not checked again here.

Dropout: the twin is built with the run's seed, so a backend that draws its masks from the seed
and the step count (the built-in ones) draws the same masks in both steps and the replay is
exact. Where the masks differ, the update misses the spec's by noise that no common deviation
fits: that is logged as skipped (``MASKS_DIFFER``), and a step that fits a deviation still stops
the run. The replay is skipped, with its reason on the record, where it cannot be exact: a run of
several processes (rank 0's step sees its own slice and the reduced gradient), a strategy other
than sync, a precision below fp32 (the bounds are float32's), a backend with neither SGD nor
AdaDelta to probe with, and a resumed run (its first step is in the log it resumes). Exported
weights that are not the family's layout are logged as a skip too, which `benchbase check` refuses
(the reference cannot read them; independent scoring fails such a run as well).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import numpy as np

from benchbase.backend import Backend, Batch, BuildContext
from benchbase.compliance.keys import REPLAY_NOT_THE_LAYOUT, REPLAY_SKIP_REASONS
from benchbase.errors import BenchbaseError, OptimizerMismatch
from benchbase.families.parts import family_parts
from benchbase.optimizers.probe import GradientProbe, probe_optimizer, trainable_names
from benchbase.optimizers.update_check import GRADIENT_ROUNDINGS, replayed_update
from benchbase.specs.strategy import SyncSpec

__all__ = ["MASKS_DIFFER", "SKIP_REASONS", "replay_first_step", "why_not_replayed"]

SKIP_REASONS = REPLAY_SKIP_REASONS
"""Every reason a closed run may log for not replaying its first step; `benchbase check` accepts these only."""
MULTI_PROCESS, STRATEGY, LOWER_PRECISION, NO_PROBE, MASKS_DIFFER = SKIP_REASONS
NOT_THE_LAYOUT = REPLAY_NOT_THE_LAYOUT
Arrays = Mapping[str, np.ndarray]


def why_not_replayed(context: BuildContext, optimizers: tuple[str, ...] | frozenset[str], weights: Arrays
                     ) -> str | None:
    """Why the first step of a run built with ``context`` cannot be replayed exactly from ``weights``
    (exported before it); None when it can."""
    try:
        family_parts(context.model).validate_weights(weights, context.model, context.feature_dimension)
    except BenchbaseError as error:  # not the family's layout: `benchbase check` accepts no such skip
        return f"{NOT_THE_LAYOUT}: {error}"
    if context.plan.world_size > 1:
        return MULTI_PROCESS
    if not isinstance(context.strategy, SyncSpec):
        return STRATEGY
    if context.model.precision != "fp32":
        return LOWER_PRECISION
    if probe_optimizer(optimizers) is None:
        return NO_PROBE
    return None


def replay_first_step(backend_class: type[Backend], context: BuildContext, before: Arrays, batch: Batch,
                      after: Arrays) -> dict:
    """The replay's record for the log; raises OptimizerMismatch when the step was not the spec's.
    ``before`` and ``after``: the run's exported weights around its first step on ``batch``."""
    started = time.perf_counter()
    probe_spec = probe_optimizer(backend_class.capabilities.optimizers)
    assert probe_spec is not None  # why_not_replayed said so
    parts = family_parts(context.model)
    names = trainable_names(before, parts.normalization_layers(context.model))
    twin = backend_class()
    try:
        twin.build(dataclasses.replace(context, optimizer=probe_spec))
        probe = GradientProbe(twin, probe_spec, names, GRADIENT_ROUNDINGS * _forward_rounding(parts, context, before,
                                                                                               batch))
        gradient, bound = probe.gradient(before, batch)
    finally:
        twin.close()
    worst, mismatch, named = replayed_update(context.optimizer, before, gradient, bound, after)
    record = {"optimizer": context.optimizer.name, "probe": probe_spec.name, "worst_ratio": round(worst, 6),
              "seconds": round(time.perf_counter() - started, 3)}
    if mismatch is None:
        return {**record, "agree": True}
    if _has_dropout(parts, context) and not named:
        return {**record, "agree": None, "skipped": MASKS_DIFFER}
    raise OptimizerMismatch(f"the optimizer step is not the workload's: {mismatch}")


ROUNDING_SAMPLE = 2
"""How many of the batch's longest utterances estimate the forward pass's relative rounding."""


def _forward_rounding(parts, context: BuildContext, weights: Arrays, batch: Batch) -> float:
    """The forward pass's relative rounding bound, as the kit takes it, on the batch's longest
    utterances: their recursions are the longest, so their rounding relative to their loss is the
    largest. The bound's rounding draws over a whole ds2-mini batch took 12.2 s of the replay's
    12.3 s on 2 cores (cProfile); on two utterances the replay took 3.9 s, its worst ratio to the
    bound 0.2014 against 0.2015."""
    longest = np.argsort(-batch.output_lengths, kind="stable")[:ROUNDING_SAMPLE]
    sample = dataclasses.replace(
        batch, features=batch.features[longest], feature_lengths=batch.feature_lengths[longest],
        output_lengths=batch.output_lengths[longest], labels=batch.labels[longest],
        label_lengths=batch.label_lengths[longest], utterance_ids=tuple(batch.utterance_ids[i] for i in longest),
        transcripts=tuple(batch.transcripts[i] for i in longest))
    reference = parts.reference_step(weights, parts.without_dropout(context.model), sample)
    return reference.loss_bound / max(abs(reference.loss), np.finfo(np.float64).tiny)


def _has_dropout(parts, context: BuildContext) -> bool:
    return parts.without_dropout(context.model) != context.model
