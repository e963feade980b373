"""What a run is assembled from once its plan stands: the harness's pipelines and the context
build() gets, the same on every rank; and the fp32 context of a lower-precision run's twin."""

from __future__ import annotations

import dataclasses

from benchbase.backend import Backend, BuildContext, DevicePlan
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.specs import RunConfig
from benchbase.specs.strategy import SyncSpec

__all__ = ["build_context", "fp32_context", "pad_into_backend_arrays", "run_pipeline"]


def run_pipeline(config: RunConfig, store: FeatureStore, subsets: tuple[str, ...], training: bool) -> BatchPipeline:
    """The harness's batches: every rank builds the same pipeline, so all see the same global batches."""
    pipeline, data, model = config.hardware.pipeline, config.workload.data, config.workload.model
    if training:
        return BatchPipeline(store, subsets, pipeline.global_batch, model=model, readers=pipeline.readers,
                             prefetch=pipeline.buffer, shuffle_buffer=pipeline.shuffle_buffer, shuffle=True,
                             drop_last=True, seed=config.seed, length_buckets=data.length_buckets,
                             pad_to_frames=data.pad_to_frames, reader_processes=pipeline.reader_processes)
    return BatchPipeline(store, subsets, pipeline.global_batch, model=model, readers=pipeline.readers,
                         prefetch=pipeline.buffer, shuffle=False, drop_last=False, seed=config.seed,
                         pad_to_frames=data.pad_to_frames)


def pad_into_backend_arrays(backend: Backend, train_data: BatchPipeline) -> None:
    """After build(): the training pipeline pads into the backend's host arrays, where it offers its
    own (``Backend.host_array``: page-locked memory, so a GPU copy needs no staging). The dev
    pipelines keep NumPy's: independent scoring re-reads an evaluation batch's features after
    predict(), and memory the backend holds could be rewritten under it."""
    if type(backend).host_array is not Backend.host_array:
        train_data.host_arrays = backend.host_array


def build_context(config: RunConfig, store: FeatureStore, plan: DevicePlan) -> BuildContext:
    """What build() gets: the pinned specs, the plan, and the longest input the run will feed."""
    workload = config.workload
    # Every subset the run will feed the backend, the final evaluation's test subsets included.
    # (A missing train or dev subset is an error there; a missing test subset is left out.)
    fed = workload.data.train + workload.data.dev + tuple(subset for subset in workload.data.test
                                                          if store.has(subset))
    longest_frames, longest_labels = store.longest(fed)
    return BuildContext(
        model=workload.model, optimizer=workload.optimizer, feature_dimension=store.feature_dimension, plan=plan,
        seed=config.seed, max_frames=workload.data.pad_to_frames or longest_frames, max_label_length=longest_labels,
        strategy=config.strategy,
    )


def fp32_context(context: BuildContext) -> BuildContext:
    """The same build at fp32: what the final evaluation's FP32 twin of a lower-precision run gets."""
    # Rank 0 evaluates it alone, after the other processes have left: a world of one device.
    plan = context.plan
    if plan.distributed:
        plan = dataclasses.replace(plan, count=plan.process_devices, world_size=1, rank=0, devices_per_process=None,
                                   peer_addresses=())
    return dataclasses.replace(context, model=context.model.model_copy(update={"precision": "fp32"}), plan=plan,
                               strategy=SyncSpec())
