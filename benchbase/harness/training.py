"""The timed loop: epochs of batches on the run clock, each epoch's evaluation, the checkpoints."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path

import numpy as np
import pluggy

from benchbase.backend import STEP_STAGES, Backend, Batch
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.compliance.keys import StopReason, constants
from benchbase.data.augmentation import training_batch
from benchbase.data.pipeline import EpochBatches, RunEpochs
from benchbase.errors import BenchbaseError, NonFiniteError, OptimizerMismatch, PredictionMismatch, Terminated
from benchbase.families.parts import EvaluationHead, family_parts
from benchbase.harness.clock import RunClock
from benchbase.harness.compute import EpochFlops, batch_flops_of
from benchbase.harness.devices import own_slice
from benchbase.harness.evaluation import evaluate_subsets, predicted_log_probs, subset_records
from benchbase.harness.hook_payloads import BatchProgress, Evaluation, SubsetScore
from benchbase.harness.independent_scoring import UtteranceSample, score_sample
from benchbase.harness.initialization import RunInputs
from benchbase.harness.optimizer_replay import replay_first_step, why_not_replayed
from benchbase.harness.profiling import StepProfiler
from benchbase.harness.progress import TrainingProgress
from benchbase.harness.rank_checkpoints import collect_rank_checkpoints
from benchbase.harness.recorder import RunRecorder
from benchbase.harness.termination import deferred_termination, termination_requested
from benchbase.harness.world import Coordinator, Verdict
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig

__all__ = ["SENTENCES_PER_LOG", "TrainingLoop"]

SENTENCES_PER_LOG = 3


@dataclass
class EpochCommunication:
    """An epoch's communication as the backend measured it (step_timings), summed over its steps."""

    sent_bytes: float = 0.0
    seconds: float = 0.0
    steps: int = 0

    def add(self, sent_bytes: float, seconds: float) -> None:
        self.sent_bytes, self.seconds, self.steps = self.sent_bytes + sent_bytes, self.seconds + seconds, self.steps + 1

    def per_step(self) -> dict[str, float]:
        return {"bytes_per_step": round(self.sent_bytes / self.steps, 1),
                "seconds_per_step": round(self.seconds / self.steps, 6), "steps": self.steps}


class TrainingLoop:
    """Epochs of batches on the clock: every batch trained and recorded, a checkpoint and decoded
    sentences every so many, an evaluation every so many epochs, until a stop."""

    def __init__(self, config: RunConfig, hook: pluggy.HookRelay, clock: RunClock, log: ComplianceLog,
                 recorder: RunRecorder, coordinator: Coordinator, inputs: RunInputs, backend: Backend,
                 progress: TrainingProgress, *, resumed: bool, build_seconds: float = 0.0) -> None:
        """``resumed``: training goes on from ``progress.position``, whose epoch the log has started;
        ``build_seconds``: what backend.build() took on the clock, for the start-up record."""
        self.config = config
        self.workload = config.workload
        self.hook = hook
        self.clock = clock
        self.log = log
        self.recorder = recorder
        self.folder = recorder.folder
        self.coordinator = coordinator
        self.inputs = inputs
        self.backend = backend
        self.progress = progress
        self.resumed = resumed
        self.profiler = StepProfiler(backend, config.profile_steps, self.folder.profile)
        self.build_seconds = build_seconds
        self.started_up = False
        """Whether this process's first training step is on the record (benchbase_startup)."""
        self.epoch_communication = EpochCommunication()
        self.batch_flops = batch_flops_of(config.workload.model)
        """The family's cost of a global batch; None where the family has no cost model."""
        self.epoch_flops = EpochFlops()

    def train(self) -> tuple[StopReason, int]:
        """Train until a stop; returns why and the last epoch. On SIGTERM, checkpoints before raising Terminated."""
        try:
            return self._train()
        except Terminated:
            self._checkpoint_on_termination()
            raise

    def _train(self) -> tuple[StopReason, int]:
        first_epoch, done_in_first = self.progress.position if self.resumed else (1, 0)
        epochs = RunEpochs(self.inputs.train_data, self.workload.max_epochs)
        epochs.start(first_epoch, skip=done_in_first)
        try:
            for epoch in range(first_epoch, self.workload.max_epochs + 1):
                resumed_epoch = self.resumed and epoch == first_epoch
                if not resumed_epoch:  # a resumed epoch's start is in the log already
                    self.log.start(constants.EPOCH_START, metadata={constants.EPOCH_NUM: epoch})
                batches = epochs.take(epoch, skip=done_in_first if resumed_epoch else 0)
                try:
                    # The next epoch's readers start with this epoch's last step, and fill its shuffle
                    # buffer while that step trains and this epoch is evaluated.
                    finished_epoch = self._train_epoch(epoch, batches, done_in_first if resumed_epoch else 0,
                                                       on_last_batch=partial(epochs.start, epoch + 1))
                finally:
                    batches.close()  # also when training raised: its readers stop now, not at exit
                if finished_epoch:  # an epoch shorter than its length: started here, before the evaluation
                    epochs.start(epoch + 1)
                self.log.end(constants.EPOCH_STOP, metadata={constants.EPOCH_NUM: epoch})
                self._log_communication(epoch)
                self._log_flops(epoch)
                if not finished_epoch:
                    return StopReason.MAX_MINUTES, epoch
                if epoch % self.workload.evaluation.every_epochs == 0:
                    self._evaluate(epoch)
                reason = (StopReason.TARGETS_REACHED if self.progress.tracker.all_reached else
                          StopReason.MAX_MINUTES if self._out_of_time() else None)
                # The other ranks waited here while this one evaluated; now they learn whether to go on.
                verdict = self.coordinator.agree(Verdict.CONTINUE if reason is None else Verdict.STOP)
                if verdict == Verdict.TERMINATED:
                    raise Terminated()
                if reason is not None:
                    return reason, epoch
            return StopReason.MAX_EPOCHS, self.workload.max_epochs
        finally:
            epochs.close()  # an epoch started for a run that stopped before it

    def _train_epoch(self, epoch: int, batches: EpochBatches, done: int, on_last_batch: Callable[[], None]) -> bool:
        """Train one epoch (``done`` of its batches trained already); False when the time limit stopped it
        early. ``on_last_batch`` is called when the epoch's last batch has arrived, before it trains."""
        last_batch = len(self.inputs.train_data)
        for batch_in_epoch in range(done + 1, last_batch + 1):
            waited_from = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            if batch_in_epoch == last_batch:
                on_last_batch()
            # Masked here, inside the data wait, and before slicing: every rank masks the global batch alike.
            trained = training_batch(batch, self.workload.augmentation, self.config.seed, epoch, batch_in_epoch)
            before = self._weights_before_first_step(epoch)
            step_from, cpu_from = time.perf_counter(), time.process_time()
            with deferred_termination(), self.profiler.around(self.progress.batch_index + 1):
                # SIGTERM waits for the update to complete
                loss = self.backend.train_step(own_slice(trained, self.inputs.plan))
            step, cpu = time.perf_counter() - step_from, time.process_time() - cpu_from
            if not isinstance(loss, float):
                raise BenchbaseError(f"backend {self.config.backend!r}: train_step returned a "
                                     f"{type(loss).__name__}; the contract asks for a Python float")
            if not math.isfinite(loss):
                # Training on from here would measure garbage; the batch is named so it can be inspected.
                raise NonFiniteError(f"batch {self.progress.batch_index + 1} (epoch {epoch}): train_step returned a "
                                     f"loss of {loss} on utterances {_named(batch.utterance_ids)}")
            if before is not None:
                self._replay_first_step(epoch, before, trained)
            self._after_batch(epoch, batch_in_epoch, batch, loss, step_from - waited_from, step, cpu)
            verdict = self.coordinator.agree(Verdict.TERMINATED if termination_requested() else
                                             Verdict.STOP if self._out_of_time() else Verdict.CONTINUE)
            if verdict == Verdict.TERMINATED:
                raise Terminated()
            if verdict == Verdict.STOP:
                return False
        return True

    def _weights_before_first_step(self, epoch: int) -> dict[str, np.ndarray] | None:
        """Before a fresh run's first step, off the clock: the weights its replay starts from (None on
        any other step, and where the replay cannot be exact: the reason goes into the log)."""
        if self.resumed or self.progress.batch_index > 0:
            return None
        with self._off_clock(epoch, "optimizer_replay"):
            weights = {name: np.array(value, copy=True) for name, value in self.backend.export_weights().items()}
            reason = why_not_replayed(self.inputs.context, type(self.backend).capabilities.optimizers, weights)
        if reason is None:
            return weights
        self.log.event(own_keys.OPTIMIZER_REPLAY, value={"skipped": reason}, metadata={constants.EPOCH_NUM: epoch})
        return None

    def _replay_first_step(self, epoch: int, before: dict[str, np.ndarray], batch: Batch) -> None:
        """After the first step, off the clock: the workload's optimizer must land where the step did."""
        metadata = {constants.EPOCH_NUM: epoch}
        with self._off_clock(epoch, "optimizer_replay"):
            try:
                record = replay_first_step(type(self.backend), self.inputs.context, before, batch,
                                           self.backend.export_weights())
            except OptimizerMismatch as error:
                self.log.event(own_keys.OPTIMIZER_REPLAY, value={"agree": False, "error": str(error)},
                               metadata=metadata)
                raise
            self.log.event(own_keys.OPTIMIZER_REPLAY, value=record, metadata=metadata)

    @contextmanager
    def _off_clock(self, epoch: int, why: str) -> Iterator[None]:
        """Work the run clock leaves out, as an interval in the log that `benchbase check` subtracts."""
        metadata = {constants.EPOCH_NUM: epoch, "why": why}
        self.log.start(own_keys.OFF_CLOCK, metadata=metadata)
        try:
            with self.clock.paused():
                yield
        finally:
            self.log.end(own_keys.OFF_CLOCK, metadata=metadata)

    def _after_batch(self, epoch: int, batch_in_epoch: int, batch: Batch, loss: float, wait: float, step: float,
                     cpu: float) -> None:
        if not self.started_up:
            self._log_startup(wait, step)
        progress = self.progress
        progress.batch_trained(epoch, batch_in_epoch, batch.size)
        throughput = progress.statistics.record(batch.size, wait, step, cpu)
        report = BatchProgress(epoch, batch_in_epoch, len(self.inputs.train_data), progress.batch_index,
                               self.clock.seconds(), loss, throughput, wait)
        timings = self.backend.step_timings()
        progress.statistics.record_communication(timings.get("communication"))
        progress.statistics.record_stages({stage: timings[stage] for stage in STEP_STAGES if stage in timings})
        if "communication_bytes" in timings:
            self.epoch_communication.add(timings["communication_bytes"], timings.get("communication", 0.0))
        # The global batch: every rank's step together computes it, on every device of the run.
        flops = None if self.batch_flops is None else self.batch_flops(batch)
        if flops is not None:
            progress.statistics.record_flops(*flops)
            self.epoch_flops.add(*flops)
        self.recorder.batch(report, step, batch.size, timings, flops)
        evaluation = self.workload.evaluation
        if progress.batch_index % evaluation.log_sentences_every == 0:
            self._log_sentences(epoch, batch)
        if progress.batch_index % (self.config.checkpoint_every or evaluation.checkpoint_every) == 0:
            self._checkpoint({constants.EPOCH_NUM: epoch})
        self.hook.batch_completed(progress=report)

    def _log_communication(self, epoch: int) -> None:
        """What this learner's backend communicated in the epoch's steps, per step (where it counts bytes)."""
        epoch_total, self.epoch_communication = self.epoch_communication, EpochCommunication()
        if epoch_total.steps:
            self.log.event(own_keys.COMMUNICATION, metadata={constants.EPOCH_NUM: epoch}, value=epoch_total.per_step())

    def _log_flops(self, epoch: int) -> None:
        """The epoch's training FLOPs by the family's cost model (`benchbase check` sums them)."""
        epoch_total, self.epoch_flops = self.epoch_flops, EpochFlops()
        if epoch_total.steps:
            self.log.event(own_keys.EPOCH_FLOPS, metadata={constants.EPOCH_NUM: epoch}, value=epoch_total.record())

    def _log_startup(self, wait: float, step: float) -> None:
        """Where the clock went between run_start (or a resume) and the end of the first step."""
        self.started_up = True
        self.log.event(own_keys.STARTUP, value={"build_s": round(self.build_seconds, 4),
                                                "first_batch_wait_s": round(wait, 4), "first_step_s": round(step, 4),
                                                "first_step_end_s": round(self.clock.seconds(), 4)})

    def _checkpoint(self, metadata: dict) -> None:
        """A periodic checkpoint, with every other rank's beside it in a run of several processes."""
        started = self.clock.seconds()
        path = self.recorder.checkpoint(self.progress.batch_index, self.backend.save_checkpoint,
                                        self.progress.resume_state(self.clock.seconds()),
                                        ranks=lambda: collect_rank_checkpoints(self.coordinator))
        seconds = self.clock.seconds() - started
        self.progress.statistics.checkpoint_seconds += seconds
        self.recorder.checkpoint_time(self.progress.batch_index, seconds, self.clock.seconds())
        world = self.coordinator.world
        if world.distributed:
            metadata = {**metadata, own_keys.RANK_CHECKPOINTS: [
                self.folder.relative(RunFolder.rank_checkpoint(path, rank)) for rank in range(1, world.size)]}
        self._log_checkpoint(path, metadata)

    def _log_checkpoint(self, path: Path, metadata: dict) -> None:
        """Name the checkpoint in the log (`benchbase check` looks for it) and tell the plugins."""
        batch_index = self.progress.batch_index
        self.log.event(own_keys.CHECKPOINT, value=self.folder.relative(path),
                       metadata={**metadata, own_keys.BATCH: batch_index})
        self.hook.checkpoint_saved(path=path, batch_index=batch_index)

    def _checkpoint_on_termination(self) -> None:
        """SIGTERM (a preemption): keep what was trained. The model is consistent here, since a
        SIGTERM during train_step waits for the step to finish; in a run of several processes every
        rank stopped at the same verdict and checkpoints its own state beside this one."""
        if self.progress.batch_index == 0:
            return
        with deferred_termination():  # a second SIGTERM must not tear this checkpoint
            self._checkpoint({"terminated": True})

    def save_final_checkpoint(self, epoch: int) -> None:
        """After run_stop, off the clock: the weights the final evaluation scores, which `benchbase
        verify` loads to re-evaluate them, and the same weights exported, which `benchbase verify`
        re-scores with the reference model alone."""
        path = self.recorder.final_checkpoint(self.backend.save_checkpoint)
        self._log_checkpoint(path, {constants.EPOCH_NUM: epoch, own_keys.FINAL: True})
        path, digest = self.recorder.exported_weights(self.backend.export_weights())
        self.log.event(own_keys.EXPORTED_WEIGHTS, value={"path": self.folder.relative(path), "sha256": digest},
                       metadata={constants.EPOCH_NUM: epoch})

    def _log_sentences(self, epoch: int, batch: Batch) -> None:
        outputs = predicted_log_probs(self.backend, batch.inputs())
        hypotheses = self._evaluation_head().greedy(outputs, batch.output_lengths)
        for index in range(min(SENTENCES_PER_LOG, batch.size)):
            self.recorder.training_sentence({
                "epoch": epoch, "batch": self.progress.batch_index, "t": round(self.clock.seconds(), 3),
                "id": batch.utterance_ids[index], "reference": batch.transcripts[index],
                "hypothesis": hypotheses[index],
            })

    def _out_of_time(self) -> bool:
        return self.clock.seconds() >= self.workload.max_minutes * 60

    def _evaluate(self, epoch: int) -> Evaluation:
        started = self.clock.seconds()
        dev_data = self.inputs.dev_data
        self.log.start(constants.EVAL_START, metadata={constants.EPOCH_NUM: epoch})
        batches = sum(len(data) for data in dev_data.values())
        self.hook.eval_started(epoch=epoch, batches=batches)
        scored_subset = self.workload.scored_subset
        sample_size = self.workload.evaluation.independent_utterances
        sample = UtteranceSample(scored_subset, sample_size) if sample_size else None
        predicted = 0

        def observe(subset: str, batch: Batch, log_probs: np.ndarray) -> None:
            nonlocal predicted
            if sample is not None:
                sample(subset, batch, log_probs)
            predicted += 1
            self.hook.eval_batch_completed(subset=subset, done=predicted, batches=batches)

        head = self._evaluation_head()
        results = evaluate_subsets(self.backend, dev_data, head, observe=observe)
        for subset, result in results.items():
            # The decoded outputs are the evidence behind the rates: `benchbase check` recomputes them.
            decoded = self.recorder.decoded(self.folder.decoded_evaluation(subset, epoch), result.references,
                                            result.hypotheses)
            self.log.event(constants.EVAL_ACCURACY, value=result.rates(),
                           metadata={constants.EPOCH_NUM: epoch, own_keys.SUBSET: subset,
                                     own_keys.DECODED: self.folder.relative(decoded),
                                     own_keys.UTTERANCES: result.utterances})
        self.log.end(constants.EVAL_STOP, metadata={constants.EPOCH_NUM: epoch})
        finished = self.clock.seconds()
        scored = results[scored_subset]
        if sample is not None:
            self._score_independently(epoch, sample, scored.hypotheses, head)
        tracker = self.progress.tracker
        tracker.update(epoch, finished, scored.rates())
        evaluation = Evaluation(**{field.name: getattr(scored, field.name) for field in fields(SubsetScore)},
                                epoch=epoch, seconds=finished, eval_seconds=finished - started,
                                reached=dict(tracker.reached),
                                targets=tuple(target.label for target in self.workload.tta.targets),
                                subsets={subset: result.rates() for subset, result in results.items()})
        self.recorder.evaluation(epoch, finished, scored.subset, subset_records(results), finished - started)
        self.progress.statistics.evaluation_seconds += finished - started
        self.progress.last_evaluation = evaluation
        self.hook.eval_completed(evaluation=evaluation)
        return evaluation


    def _evaluation_head(self) -> EvaluationHead:
        """How the model family turns predict()'s outputs into texts and losses now (a transducer's
        decoding reads the backend's exported weights, so it is made anew for each use)."""
        model = self.workload.model
        return family_parts(model).evaluation_head(model, self.inputs.decoder, self.backend.export_weights)

    def _score_independently(self, epoch: int, sample: UtteranceSample, hypotheses: list[str],
                             head: EvaluationHead) -> None:
        """Off the clock: the reference re-scores the sample from the exported weights; a
        disagreement stops the run before any target counts from this evaluation."""
        metadata = {constants.EPOCH_NUM: epoch, "why": "independent_scoring"}
        self.log.start(own_keys.OFF_CLOCK, metadata=metadata)
        try:
            with self.clock.paused():
                score = score_sample(sample, self.backend.export_weights(), self.workload.model, head, hypotheses)
                self.log.event(own_keys.INDEPENDENT_SCORE, value=score.record(),
                               metadata={constants.EPOCH_NUM: epoch, own_keys.SUBSET: sample.subset})
        finally:
            self.log.end(own_keys.OFF_CLOCK, metadata=metadata)
        if not score.agree:
            raise PredictionMismatch(score.sentence())


def _named(utterance_ids: list[str], shown: int = 8) -> str:
    more = len(utterance_ids) - shown
    return ", ".join(utterance_ids[:shown]) + (f" and {more} more" if more > 0 else "")
