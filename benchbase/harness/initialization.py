"""Init, off the clock: the store checked, and everything the timed run needs assembled from it.

``check_run_data`` makes init's refusals of the run's data alone (the store, its pipelines, its
vocabulary), through the same functions that init calls: `benchbase run --dry-run` asks it, so a
dry run refuses what the run would.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchbase.backend import Backend, BuildContext, DevicePlan
from benchbase.data.integrity import verified_store
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.data.vocabulary import vocabulary_for
from benchbase.decode import evaluation_decoder
from benchbase.decode.factory import Decoder
from benchbase.errors import InputError
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.harness.devices import config_plan
from benchbase.harness.world import Coordinator
from benchbase.specs import RunConfig

__all__ = ["RunInputs", "check_run_data", "open_store", "run_data"]


def open_store(config: RunConfig) -> FeatureStore:
    """The run's store, once it is known to be what was prepared (checksums) and to fit the workload."""
    store = FeatureStore(config.data)
    verified_store(config.data)
    expected = config.workload.features.dimension
    if store.feature_dimension != expected:
        raise InputError(f"{config.data}: features have {store.feature_dimension} dimensions, "
                         f"workload {config.workload.name!r} expects {expected}")
    tokens = config.workload.data.tokens.model_dump()
    prepared = {key: store.tokens.get(key) for key in tokens}
    if prepared != tokens:
        differ = ", ".join(f"{key} {prepared[key]!r} (workload: {tokens[key]!r})" for key in tokens
                           if prepared[key] != tokens[key])
        raise InputError(f"{config.data}: labels prepared for other tokens: {differ}; prepare a store for "
                         f"workload {config.workload.name!r}")
    return store


def run_data(config: RunConfig, store: FeatureStore) -> tuple[BatchPipeline, dict[str, BatchPipeline]]:
    """The training pipeline and one per dev subset, in the workload's order; refused when the
    training subsets hold less than one global batch or a dev subset holds nothing."""
    workload = config.workload
    train_data = run_pipeline(config, store, workload.data.train, training=True)
    if len(train_data) == 0:
        raise InputError(f"{config.data}: the training subsets hold {train_data.utterances} utterances, "
                         f"fewer than one global batch of {config.hardware.pipeline.global_batch}: "
                         "no batch would be trained")
    dev_data = {subset: run_pipeline(config, store, (subset,), training=False) for subset in workload.data.dev}
    for subset, data in dev_data.items():
        if data.utterances == 0:
            raise InputError(f"{config.data}: dev subset {subset} holds no utterances; nothing to evaluate")
    return train_data, dev_data


def check_run_data(config: RunConfig) -> None:
    """Every refusal of init that comes from the run's data, and nothing built: the store sound and
    fit for the workload, its pipelines holding something, its vocabulary the workload's."""
    run_data(config, open_store(config))
    vocabulary_for(config.workload.data.tokens, config.data)


@dataclass(frozen=True)
class RunInputs:
    """What the timed run trains and evaluates with, all of it built in init."""

    store: FeatureStore
    plan: DevicePlan
    context: BuildContext
    train_data: BatchPipeline
    dev_data: dict[str, BatchPipeline]
    """One pipeline per dev subset, in the workload's order: each is evaluated on its own."""
    decoder: Decoder

    @classmethod
    def assemble(cls, config: RunConfig, store: FeatureStore, backend_class: type[Backend],
                 coordinator: Coordinator) -> RunInputs:
        """The plan (after every check that can refuse it), the pipelines and the decoder."""
        workload = config.workload
        plan = config_plan(config, backend_class, coordinator.world, coordinator.service_addresses)
        context = build_context(config, store, plan)
        train_data, dev_data = run_data(config, store)
        # Built in init, off the clock: the language model and the decoder's compiled kernel.
        decoder = evaluation_decoder(workload.evaluation, config.data, workload.data.train,
                                     blank=workload.model.blank_index, tokens=workload.data.tokens)
        return cls(store, plan, context, train_data, dev_data, decoder)
