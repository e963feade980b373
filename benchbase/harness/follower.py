"""What a rank other than 0 does in a process-per-device run: train its slice, nothing else.

It builds the same pipeline as rank 0 (same store, seed and order, so the same global batches),
trains its own slice of each batch, and meets rank 0 at the same points: the barrier before the
clock, the device roll call after build(), the verdict after every batch and after every epoch
(while it waits there, rank 0 evaluates). Rank 0 writes the log, the checkpoints and the result;
a follower writes nothing, and leaves its error in the process group's store for rank 0 to log.
"""

from __future__ import annotations

from benchbase.backend import Backend
from benchbase.data.augmentation import training_batch
from benchbase.data.store import FeatureStore
from benchbase.errors import Terminated
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.harness.devices import config_plan, own_slice
from benchbase.harness.termination import deferred_termination, termination_requested
from benchbase.harness.warm_up import run_shapes, warm_up
from benchbase.harness.world import Coordinator, Verdict
from benchbase.specs import RunConfig

__all__ = ["follow"]


def follow(config: RunConfig, backend_class: type[Backend], coordinator: Coordinator) -> None:
    try:
        _follow(config, backend_class, coordinator)
    except Terminated:
        raise  # every rank stops at the same verdict; rank 0 logs it as the interruption it is
    except BaseException as error:
        coordinator.report_failure(f"{type(error).__name__}: {error}")
        raise


def _follow(config: RunConfig, backend_class: type[Backend], coordinator: Coordinator) -> None:
    plan = config_plan(config, backend_class, coordinator.world, coordinator.service_addresses)
    store = FeatureStore(config.data)
    context = build_context(config, store, plan)
    train_data = run_pipeline(config, store, config.workload.data.train, training=True)
    backend = backend_class()
    try:
        built_before_clock = config.workload.tta.compilation == "before_run_start"
        if built_before_clock:  # as rank 0 does, in init; a follower trains only
            warm_up(backend, config.backend, context, run_shapes(train_data, [], config.workload.max_epochs))
        coordinator.barrier()  # rank 0 starts the clock
        if not built_before_clock:
            backend.build(context)
        coordinator.gather(list(backend.devices_in_use()))
        for epoch in range(1, config.workload.max_epochs + 1):
            batches = train_data.epoch(epoch)
            try:
                for batch_in_epoch, batch in enumerate(batches, start=1):
                    trained = training_batch(batch, config.workload.augmentation, config.seed, epoch, batch_in_epoch)
                    with deferred_termination():
                        backend.train_step(own_slice(trained, plan))
                    _obey(coordinator.agree(_own_verdict()))
            finally:
                batches.close()
            _obey(coordinator.agree(_own_verdict()))  # rank 0 evaluated meanwhile
    except _Stop:
        pass
    finally:
        backend.close()


class _Stop(Exception):
    """Rank 0 ended the run (a limit, every target reached)."""


def _own_verdict() -> Verdict:
    return Verdict.TERMINATED if termination_requested() else Verdict.CONTINUE


def _obey(verdict: Verdict) -> None:
    if verdict == Verdict.TERMINATED:
        raise Terminated()
    if verdict == Verdict.STOP:
        raise _Stop()
