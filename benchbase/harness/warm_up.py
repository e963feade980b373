"""Building and compiling before run_start, where the workload's TTA rule allows it.

The paper starts the clock at model creation, so by default (``tta.compilation: on_clock``) a
framework that compiles does it on the clock: JAX's XLA compiles each new batch shape in its
first step, TensorFlow traces in its first. MLPerf lets a submission build and compile before
run_start as long as that touches no data; ``before_run_start`` is that rule, and it is the
workload's, so every backend of a run is held to the same one. The harness then builds the
model in init and hands the backend the shapes of every batch the run can feed
(``BatchPipeline.batch_shapes``: the shards' lengths, never their features or transcripts) so
that it compiles on synthetic inputs. What a backend does there must leave the model as
``build()`` made it: the harness compares the exported weights before and after, and refuses the
run if they differ.
"""

from __future__ import annotations

import time

import numpy as np

from benchbase.backend import Backend, BatchShape, BuildContext
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.data.pipeline import BatchPipeline
from benchbase.errors import BenchbaseError
from benchbase.families.layout import differing_weights

__all__ = ["run_shapes", "warm_up"]


def run_shapes(train: BatchPipeline, dev: list[BatchPipeline], epochs: int) -> list[BatchShape]:
    """Every distinct shape of the training batches of epochs 1..``epochs`` and of one pass over
    each dev subset (evaluation batches are the same every time), smallest first."""
    shapes: set[BatchShape] = set()
    for epoch in range(1, epochs + 1):
        shapes.update(train.batch_shapes(epoch))
    for pipeline in dev:
        shapes.update(pipeline.batch_shapes(1))
    return sorted(shapes, key=lambda shape: (shape.rows, shape.frames, shape.label_length))


def warm_up(backend: Backend, backend_name: str, context: BuildContext, shapes: list[BatchShape],
            log: ComplianceLog | None = None) -> None:
    """build() then warm_up(shapes), both off the clock; ``log`` (rank 0's) records them."""
    started = time.perf_counter()
    backend.build(context)
    built = time.perf_counter()
    before = {name: np.array(value, copy=True) for name, value in backend.export_weights().items()}  # not views
    backend.warm_up(shapes)
    warmed = time.perf_counter()
    changed = differing_weights(before, backend.export_weights())
    if changed:
        raise BenchbaseError(f"backend {backend_name!r}: warm_up() changed the model ({', '.join(changed[:4])}); "
                             "it must compile on synthetic inputs and leave the weights as build() made them")
    if log is not None:
        log.event(own_keys.WARM_UP, value={"build_s": round(built - started, 4), "warm_up_s": round(warmed - built, 4),
                                           "shapes": len(shapes)})
