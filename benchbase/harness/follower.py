"""What a rank other than 0 does in a process-per-device run: train its slice, and keep its own state.

It builds the same pipeline as rank 0 (same store, seed and order, so the same global batches),
trains its own slice of each batch, and meets rank 0 at the same points: the barrier before the
clock, the device roll call after build(), each checkpoint, the verdict after every batch and
after every epoch (while it waits there, rank 0 evaluates). Rank 0 writes the log, the sidecars
and the result; a follower writes only its own checkpoints beside rank 0's (its learner's state:
``rank_checkpoints``), at the batches rank 0 checkpoints, and leaves its error in the process
group's store for rank 0 to log. A resumed follower loads its own checkpoint and goes on from
the batch rank 0 chose.
"""

from __future__ import annotations

from benchbase.backend import Backend, DevicePlan
from benchbase.data.augmentation import training_batch
from benchbase.data.pipeline import BatchPipeline, RunEpochs
from benchbase.data.store import FeatureStore
from benchbase.errors import Terminated
from benchbase.harness.assembly import build_context, pad_into_backend_arrays, run_pipeline
from benchbase.harness.devices import config_plan, own_slice
from benchbase.harness.host_memory import keep_host_memory_on_cpus
from benchbase.harness.rank_checkpoints import own_checkpoint, write_own_checkpoint
from benchbase.harness.resume_state import ResumeState
from benchbase.harness.termination import deferred_termination, termination_requested
from benchbase.harness.warm_up import run_shapes, warm_up
from benchbase.harness.world import Coordinator, Verdict
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig

__all__ = ["follow"]


def follow(config: RunConfig, backend_class: type[Backend], coordinator: Coordinator,
           resume: ResumeState | None = None) -> None:
    """``resume``: where rank 0's chosen checkpoint stands; this rank loads its own beside it."""
    try:
        _Follower(config, backend_class, coordinator, resume).run()
    except Terminated:
        raise  # every rank stops at the same verdict; rank 0 logs it as the interruption it is
    except BaseException as error:
        coordinator.report_failure(f"{type(error).__name__}: {error}")
        raise


class _Stop(Exception):
    """Rank 0 ended the run (a limit, every target reached)."""


class _Follower:
    def __init__(self, config: RunConfig, backend_class: type[Backend], coordinator: Coordinator,
                 resume: ResumeState | None) -> None:
        self.config = config
        self.backend_class = backend_class
        self.coordinator = coordinator
        self.resume = resume
        self.folder = RunFolder(config.out)
        self.checkpoint_every = config.checkpoint_every or config.workload.evaluation.checkpoint_every
        self.batch_index = resume.batch_index if resume is not None else 0
        """Batches trained in the whole run, counted as rank 0 counts them: the checkpoints fall alike."""

    def run(self) -> None:
        config, coordinator = self.config, self.coordinator
        plan = config_plan(config, self.backend_class, coordinator.world, coordinator.service_addresses)
        store = FeatureStore(config.data)
        context = build_context(config, store, plan)
        keep_host_memory_on_cpus(plan)
        train_data = run_pipeline(config, store, config.workload.data.train, training=True)
        self.backend = backend = self.backend_class()
        try:
            built_before_clock = config.workload.tta.compilation == "before_run_start"
            if built_before_clock:  # as rank 0 does, in init; a follower trains only
                warm_up(backend, config.backend, context, run_shapes(train_data, [], config.workload.max_epochs))
            coordinator.barrier()  # rank 0 starts the clock
            if not built_before_clock:
                backend.build(context)
            coordinator.gather(list(backend.devices_in_use()))
            pad_into_backend_arrays(backend, train_data)
            if self.resume is not None:  # right after build(), as rank 0 loads its own
                backend.load_checkpoint(own_checkpoint(self.folder, self.resume.batch_index, coordinator.world.rank))
            try:
                self._train(train_data, plan)
            except Terminated:
                self._checkpoint_on_termination()
                raise
        except _Stop:
            pass
        finally:
            backend.close()

    def _train(self, train_data: BatchPipeline, plan: DevicePlan) -> None:
        config = self.config
        first_epoch, done_in_first = ((self.resume.epoch, self.resume.batches_done_in_epoch)
                                      if self.resume is not None else (1, 0))
        epochs = RunEpochs(train_data, config.workload.max_epochs)
        try:
            for epoch in range(first_epoch, config.workload.max_epochs + 1):
                done = done_in_first if epoch == first_epoch else 0
                batches = epochs.take(epoch, skip=done)
                try:
                    for batch_in_epoch, batch in enumerate(batches, start=done + 1):
                        if batch_in_epoch == len(train_data):  # as rank 0: the next epoch's readers start
                            epochs.start(epoch + 1)
                        trained = training_batch(batch, config.workload.augmentation, config.seed, epoch,
                                                 batch_in_epoch)
                        with deferred_termination():
                            self.backend.train_step(own_slice(trained, plan))
                        self.batch_index += 1
                        if self.batch_index % self.checkpoint_every == 0:
                            self._checkpoint()
                        _obey(self.coordinator.agree(_own_verdict()))
                finally:
                    batches.close()
                epochs.start(epoch + 1)
                _obey(self.coordinator.agree(_own_verdict()))  # rank 0 evaluated meanwhile
        finally:
            epochs.close()

    def _checkpoint(self) -> None:
        write_own_checkpoint(self.coordinator, self.folder, self.batch_index, self.backend.save_checkpoint)

    def _checkpoint_on_termination(self) -> None:
        """Every rank stopped at the same verdict; rank 0 checkpoints there, and so does this one."""
        if self.batch_index == 0:
            return
        with deferred_termination():
            self._checkpoint()


def _own_verdict() -> Verdict:
    return Verdict.TERMINATED if termination_requested() else Verdict.CONTINUE


def _obey(verdict: Verdict) -> None:
    if verdict == Verdict.TERMINATED:
        raise Terminated()
    if verdict == Verdict.STOP:
        raise _Stop()
