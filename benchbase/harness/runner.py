"""The harness state machine (paper section 4.4.2).

    init (not timed) -> run_start (the clock starts at model creation)
      -> train batches; every 50: greedy-decode the batch's sentences; every 250: checkpoint
      -> every epoch: evaluate each dev subset on its own (WER, CER, paper CER, loss);
         update TTA from the workload's scored subset
      -> run_stop: success when every target is reached, aborted at max epochs / minutes
    final evaluation (not timed): every dev and test subset at the final decoder's width

``Harness`` controls the phases; ``TimedRun`` closes the timed one whatever happens,
``RunRecorder`` writes the run folder and ``TrainingStatistics`` keeps the per-batch numbers.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import pluggy

from benchbase import __version__
from benchbase.backend import CONTRACT_VERSION, Backend, Batch
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.compliance.keys import constants
from benchbase.data.integrity import verified_store
from benchbase.data.page_cache import drop_from_page_cache
from benchbase.data.pipeline import BatchPipeline, EpochBatches
from benchbase.data.store import FeatureStore
from benchbase.decode import evaluation_decoder, greedy_decode
from benchbase.errors import BenchbaseError, InputError, NonFiniteError, Terminated
from benchbase.families.ds2.weight_layout import weight_layout
from benchbase.harness.clock import RunClock
from benchbase.harness.evaluation import SubsetEvaluation, evaluate_subsets
from benchbase.harness.events import BatchProgress, Evaluation
from benchbase.harness.follower import follow
from benchbase.harness.lifecycle import TimedRun
from benchbase.harness.plan import (
    build_context,
    check_devices_in_use,
    config_plan,
    device_plan,
    fp32_context,
    own_slice,
    plan_record,
    run_pipeline,
)
from benchbase.harness.profiling import StepProfiler
from benchbase.harness.recorder import RunRecorder
from benchbase.harness.resume import ResumePoint, interrupted_at, restart_segment
from benchbase.harness.statistics import THREAD_BUDGET_ALLOWANCE, TrainingStatistics
from benchbase.harness.stop import StopReason
from benchbase.harness.termination import deferred_termination, termination_requested
from benchbase.harness.world import Solo, Verdict
from benchbase.metrics import TargetTracker
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig, RunResult
from benchbase.telemetry import TelemetrySampler
from benchbase.telemetry.cpu_features import cpu_record
from benchbase.telemetry.environment import software_environment

__all__ = ["Harness", "device_plan", "run_benchmark"]

SENTENCES_PER_LOG = 3


def run_benchmark(config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend],
                  coordinator: Solo | None = None) -> RunResult | None:
    """One run; in a process-per-device world, rank 0 runs the harness (and gets the result) and
    the other ranks train beside it (and get None)."""
    if coordinator is not None and not coordinator.world.leader:
        follow(config, backend_class, coordinator)
        return None
    return Harness(config, manager, backend_class, coordinator).run()


class Harness:
    def __init__(self, config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend],
                 coordinator: Solo | None = None, resume: ResumePoint | None = None) -> None:
        """``resume``: continue the run in ``config.out`` from this checkpoint (benchbase run --resume)."""
        self.config = config
        self.resume = resume
        self.coordinator = coordinator or Solo()
        self.world = self.coordinator.world
        self.workload = config.workload
        self.hook = manager.hook
        self.backend_class = backend_class
        self.clock = RunClock()
        self.folder = RunFolder(config.out) if resume else RunFolder.create(config.out)
        self.tracker = TargetTracker(self.workload.tta)
        self.statistics = TrainingStatistics()
        self.batch_index = 0
        self.train_samples = 0
        self.last_evaluation: Evaluation | None = None
        self.final_evaluation: dict | None = None
        self.position = (1, 0)
        """(epoch, batches done in it) after the last batch: where a checkpoint resumes."""
        self.resumes: list[dict] = []
        # Off the clock: what the run measured, for config.json, the log and result.json.
        self.environment = {**software_environment(config.backend, backend_class.__module__), "cpu": cpu_record()}

    # --- the run ------------------------------------------------------------------------

    def run(self) -> RunResult:
        if self.resume is not None:
            # Before any file is opened: when the run was interrupted, then its files restart
            # from the checkpoint and the interrupted segment moves aside.
            self.interrupted_at = interrupted_at(self.folder)
            self.segment = restart_segment(self.folder, self.resume)
        self.log = ComplianceLog(self.folder.compliance_log)
        self.recorder = RunRecorder(self.folder)
        self.timed = False
        try:
            result = self._run()
        except BaseException as error:
            self._close_files(quietly=True)  # the error on its way out is the one to report
            if not self.timed and self.resume is None:
                # Setup failed before run_start: nothing was measured, and the folder must not
                # block the same --out on the next attempt.
                shutil.rmtree(self.folder.root, ignore_errors=True)
            if isinstance(error, OSError) and error.filename is None:
                # A write to an open file (a full disk): name the run folder it went to.
                raise OSError(error.errno, error.strerror, str(self.folder.root)) from error
            raise
        self._close_files(quietly=False)
        return result

    def _close_files(self, quietly: bool) -> None:
        for close in (self.recorder.close, self.log.close):
            try:
                close()
            except OSError as error:  # flushing the last lines can meet a full disk too
                if not quietly:
                    raise OSError(error.errno, error.strerror, str(self.folder.root)) from error

    def _run(self) -> RunResult:
        init_started = time.perf_counter()
        self._initialize()
        try:
            init_seconds = time.perf_counter() - init_started
            if self.resume is None:
                self.log.end(constants.INIT_STOP)
            self.coordinator.barrier()  # every rank is ready: the clock starts for all of them at once
            if self.resume is None:
                self.clock.start()
                self.log.start(constants.RUN_START)
            else:
                self._start_resumed_clock()
            self.timed = True
            sampler = TelemetrySampler(self.folder.telemetry, self.clock.origin,
                                       processes=self.coordinator.local_processes(), gpus=self._gpus_in_use())
            with TimedRun(self.log, sampler, explain_failure=self.coordinator.peer_failure) as timed:
                self.hook.run_started(config=self.config, run_dir=self.folder.root)
                self.backend.build(self.context)
                self._check_devices()
                if self.resume is not None:
                    self._restore()
                try:
                    reason, epochs = self._train()
                except Terminated:
                    self._checkpoint_on_termination()
                    raise
                self._log_training_footprint()
                timed.finish(reason)
            run_seconds = self.clock.seconds()
            self._save_final_checkpoint(epochs)
            if self.config.final_evaluation:
                self._final_evaluation()
        except BaseException:
            _close_quietly(self.backend)
            raise
        self.backend.close()
        result = self._result(timed, epochs, init_seconds, run_seconds)
        self.recorder.result(result)
        self.hook.run_finished(result=result)
        return result

    def _initialize(self) -> None:
        self.store = FeatureStore(self.config.data)
        self._check_store()
        # MLPerf's cache_clear: the store's files leave the OS page cache, so the first epoch
        # reads from disk as a fresh machine's would. False where the OS refused.
        dropped = drop_from_page_cache(self.config.data)
        if self.resume is None:  # a resumed run's log already holds its init
            self.log.event(constants.CACHE_CLEAR, value=dropped)
            self.log.start(constants.INIT_START)
            self.folder.write_json(self.folder.config, {**self.config.model_dump(mode="json"),
                                                        "environment": self.environment})
        self.plan = config_plan(self.config, self.backend_class, self.world,
                                self.coordinator.service_addresses)
        self.context = build_context(self.config, self.store, self.plan)
        self.train_data = self._pipeline(self.workload.data.train, training=True)
        if len(self.train_data) == 0:
            raise InputError(f"{self.config.data}: the training subsets hold {self.train_data.utterances} utterances, "
                             f"fewer than one global batch of {self.config.hardware.pipeline.global_batch}: "
                             "no batch would be trained")
        self.dev_data = {subset: self._pipeline((subset,), training=False) for subset in self.workload.data.dev}
        for subset, data in self.dev_data.items():
            if data.utterances == 0:
                raise InputError(f"{self.config.data}: dev subset {subset} holds no utterances; nothing to evaluate")
        # Built in init, off the clock: the language model and the decoder's compiled kernel.
        self.decoder = evaluation_decoder(self.workload.evaluation, self.config.data, self.workload.data.train,
                                          blank=self.workload.model.ctc_blank_index)
        if self.resume is None:
            self._log_submission()
        self.backend = self.backend_class()
        self.profiler = StepProfiler(self.backend, self.config.profile_steps, self.folder.profile)

    def _check_store(self) -> None:
        """Before the clock: the store is what was prepared (checksums) and fits the workload."""
        verified_store(self.config.data)
        expected = self.workload.features.dimension
        if self.store.feature_dimension != expected:
            raise InputError(f"{self.config.data}: features have {self.store.feature_dimension} dimensions, "
                             f"workload {self.workload.name!r} expects {expected}")

    def _pipeline(self, subsets: tuple[str, ...], training: bool) -> BatchPipeline:
        return run_pipeline(self.config, self.store, subsets, training)

    def _log_submission(self) -> None:
        hardware, optimizer, evaluation = self.config.hardware, self.workload.optimizer, self.workload.evaluation
        # Everything the workload pins goes into the log, so `benchbase check` can compare it.
        for key, value in (
            (constants.SUBMISSION_ORG, self.config.submitter),
            (constants.SUBMISSION_PLATFORM, hardware.name),
            (constants.SUBMISSION_DIVISION, self.config.division),
            (constants.SUBMISSION_STATUS, "research"),
            (constants.SUBMISSION_BENCHMARK, self.workload.name),
            (constants.SUBMISSION_ENTRY, f"benchbase {__version__} backend={self.config.backend}"),
            (own_keys.BACKEND_CONTRACT, CONTRACT_VERSION),
            (own_keys.ENVIRONMENT, self.environment),
            (constants.SEED, self.config.seed),
            (constants.GLOBAL_BATCH_SIZE, hardware.pipeline.global_batch),
            (constants.GRADIENT_ACCUMULATION_STEPS, 1),
            (constants.TRAIN_SAMPLES, self.train_data.utterances),
            (constants.EVAL_SAMPLES, self.dev_data[self.workload.scored_subset].utterances),
            (own_keys.EVAL_SUBSETS, {subset: data.utterances for subset, data in self.dev_data.items()}),
            (own_keys.TTA_SUBSET, self.workload.scored_subset),
            (constants.OPT_NAME, optimizer.name),
            (constants.OPT_BASE_LR, optimizer.learning_rate),
            (own_keys.OPT_ADADELTA_RHO, optimizer.rho),
            (own_keys.OPT_ADADELTA_EPSILON, optimizer.epsilon),
            (constants.OPT_GRADIENT_CLIP_NORM, optimizer.gradient_clip_norm),
            (own_keys.PRECISION, self.workload.model.precision),
            (own_keys.EVAL_DECODER, evaluation.decoder),
            (own_keys.EVAL_BEAM_WIDTH, evaluation.beam_width),
            (own_keys.EVAL_LM_MODE, evaluation.lm_mode),
            (own_keys.EVAL_LM_ALPHA, evaluation.lm_alpha),
            (own_keys.EVAL_LM_BETA, evaluation.lm_beta),
            (own_keys.WORLD_SIZE, self.plan.world_size),
            (own_keys.DEVICE_PLAN, plan_record(self.plan, hardware)),
            (own_keys.OVERRIDES, list(self.config.overrides)),
            (own_keys.OPEN_CHANGES, list(self.config.open_changes)),
        ):
            self.log.event(key, value=value)

    def _check_devices(self) -> None:
        """Right after build(): the devices every rank trains on, on the record and as the plan says."""
        per_rank = self.coordinator.gather(list(self.backend.devices_in_use()))
        self.devices = [device for devices in per_rank for device in devices] if len(per_rank) == 1 else [
            f"rank {rank}: {device}" for rank, devices in enumerate(per_rank) for device in devices]
        self.log.event(own_keys.DEVICES, value=self.devices)
        check_devices_in_use(per_rank, self.plan, self.config.backend)

    def _log_training_footprint(self) -> None:
        """After training, before the backend closes: its description, size and the CPU cores its steps kept busy."""
        self.device_description = self.backend.device_description()
        self.parameter_count = self.backend.parameter_count()
        self.log.event(own_keys.CPU_CORES_IN_STEPS, value=self.statistics.cpu_cores_in_steps(),
                       metadata={own_keys.THREAD_BUDGET: self._thread_budget()})

    def _gpus_in_use(self) -> list[str] | None:
        """The GPUs this machine's processes train on, as CUDA_VISIBLE_DEVICES entries (None: a CPU run)."""
        if self.plan.kind != "cuda":
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = [entry.strip() for entry in visible.split(",")] if visible is not None else [
            str(index) for index in range(self.plan.count)]
        per_device = self.backend_class.capabilities.process_model == "process_per_device"
        here = self.world.local_size if per_device and self.plan.distributed else self.plan.process_devices
        return entries[:here]  # rank r of this machine trains on the r-th visible GPU

    def _thread_budget(self) -> int:
        return self.plan.threads or os.cpu_count() or 1

    # --- training -----------------------------------------------------------------------

    def _train(self) -> tuple[StopReason, int]:
        first_epoch, done_in_first = self.position if self.resume is not None else (1, 0)
        upcoming: EpochBatches | None = self.train_data.epoch(first_epoch, skip=done_in_first)
        try:
            for epoch in range(first_epoch, self.workload.max_epochs + 1):
                resumed_epoch = self.resume is not None and epoch == first_epoch
                if not resumed_epoch:  # a resumed epoch's start is in the log already
                    self.log.start(constants.EPOCH_START, metadata={constants.EPOCH_NUM: epoch})
                batches, upcoming = upcoming, None
                try:
                    finished_epoch = self._train_epoch(epoch, batches, done_in_first if resumed_epoch else 0)
                finally:
                    batches.close()  # also when training raised: its readers stop now, not at exit
                if finished_epoch and epoch < self.workload.max_epochs:
                    # The next epoch's readers fill its shuffle buffer while this one is evaluated.
                    upcoming = self.train_data.epoch(epoch + 1)
                self.log.end(constants.EPOCH_STOP, metadata={constants.EPOCH_NUM: epoch})
                if not finished_epoch:
                    return StopReason.MAX_MINUTES, epoch
                if epoch % self.workload.evaluation.every_epochs == 0:
                    self._evaluate(epoch)
                reason = (StopReason.TARGETS_REACHED if self.tracker.all_reached else
                          StopReason.MAX_MINUTES if self._out_of_time() else None)
                # The other ranks waited here while this one evaluated; now they learn whether to go on.
                verdict = self.coordinator.agree(Verdict.CONTINUE if reason is None else Verdict.STOP)
                if verdict == Verdict.TERMINATED:
                    raise Terminated()
                if reason is not None:
                    return reason, epoch
            return StopReason.MAX_EPOCHS, self.workload.max_epochs
        finally:
            if upcoming is not None:
                upcoming.close()

    def _train_epoch(self, epoch: int, batches: EpochBatches, done: int = 0) -> bool:
        """Train one epoch (``done`` of its batches trained already); False when the time limit stopped it early."""
        for batch_in_epoch in range(done + 1, len(self.train_data) + 1):
            waited_from = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            step_from, cpu_from = time.perf_counter(), time.process_time()
            with deferred_termination(), self.profiler.around(self.batch_index + 1):
                # SIGTERM waits for the update to complete
                loss = self.backend.train_step(own_slice(batch, self.plan))
            step, cpu = time.perf_counter() - step_from, time.process_time() - cpu_from
            if not isinstance(loss, float):
                raise BenchbaseError(f"backend {self.config.backend!r}: train_step returned a "
                                     f"{type(loss).__name__}; the contract asks for a Python float")
            if not math.isfinite(loss):
                # Training on from here would measure garbage; the batch is named so it can be inspected.
                raise NonFiniteError(f"batch {self.batch_index + 1} (epoch {epoch}): train_step returned a loss of "
                                     f"{loss} on utterances {_named(batch.utterance_ids)}")
            self._after_batch(epoch, batch_in_epoch, batch, loss, step_from - waited_from, step, cpu)
            verdict = self.coordinator.agree(Verdict.TERMINATED if termination_requested() else
                                             Verdict.STOP if self._out_of_time() else Verdict.CONTINUE)
            if verdict == Verdict.TERMINATED:
                raise Terminated()
            if verdict == Verdict.STOP:
                return False
        return True

    def _after_batch(self, epoch: int, batch_in_epoch: int, batch: Batch, loss: float, wait: float, step: float,
                     cpu: float) -> None:
        self.batch_index += 1
        self.train_samples += batch.size
        self.position = (epoch, batch_in_epoch)
        throughput = self.statistics.record(batch.size, wait, step, cpu)
        progress = BatchProgress(epoch, batch_in_epoch, len(self.train_data), self.batch_index, self.clock.seconds(),
                                 loss, throughput, wait)
        timings = self.backend.step_timings()
        self.statistics.record_communication(timings.get("communication"))
        self.recorder.batch(progress, step, batch.size, timings)
        evaluation = self.workload.evaluation
        if self.batch_index % evaluation.log_sentences_every == 0:
            self._log_sentences(epoch, batch)
        if self.batch_index % (self.config.checkpoint_every or evaluation.checkpoint_every) == 0:
            path = self.recorder.checkpoint(self.batch_index, self.backend.save_checkpoint, self._harness_state())
            self._log_checkpoint(path, {constants.EPOCH_NUM: epoch})
        self.hook.batch_completed(progress=progress)

    def _log_checkpoint(self, path: Path, metadata: dict) -> None:
        """Name the checkpoint in the log (`benchbase check` looks for it) and tell the plugins."""
        self.log.event(own_keys.CHECKPOINT, value=self.folder.relative(path),
                       metadata={**metadata, "batch": self.batch_index})
        self.hook.checkpoint_saved(path=path, batch_index=self.batch_index)

    def _checkpoint_on_termination(self) -> None:
        """SIGTERM (a preemption): keep what was trained. The model is consistent here, since a
        SIGTERM during train_step waits for the step to finish."""
        if self.batch_index == 0:
            return
        with deferred_termination():  # a second SIGTERM must not tear this checkpoint
            path = self.recorder.checkpoint(self.batch_index, self.backend.save_checkpoint, self._harness_state())
            self._log_checkpoint(path, {"terminated": True})

    # --- resuming -----------------------------------------------------------------------

    def _harness_state(self) -> dict:
        """What a checkpoint's sidecar holds beside the backend's file: enough to go on exactly."""
        epoch, done = self.position
        return {"batch_index": self.batch_index, "epoch": epoch, "batches_done_in_epoch": done,
                "train_samples": self.train_samples, "clock_s": round(self.clock.seconds(), 4),
                "step_cpu_seconds": self.statistics.step_cpu_seconds,
                "tracker": {"history": self.tracker.history, "reached": self.tracker.reached,
                            "reached_epoch": self.tracker.reached_epoch},
                "last_evaluation": None if self.last_evaluation is None else asdict(self.last_evaluation),
                "resumes": self.resumes}

    def _start_resumed_clock(self) -> None:
        """The clock goes on from the interruption (the restart's init was not timed), and the log says so."""
        point = self.resume
        assert point is not None
        self.clock.start(offset=self.interrupted_at)
        segment = self.segment
        self.log.event(own_keys.RESUME, value={
            "checkpoint": self.folder.relative(point.checkpoint), "batch": point.batch_index,
            "epoch": point.state["epoch"], "segment": segment, "interrupted_at_s": round(self.interrupted_at, 4),
            "lost_s": round(self.interrupted_at - point.state["clock_s"], 4),
            "skipped": list(point.skipped)})

    def _restore(self) -> None:
        """Right after build(): the backend's state from the checkpoint, the harness's from its sidecar."""
        point = self.resume
        assert point is not None
        self.backend.load_checkpoint(point.checkpoint)
        state = point.state
        self.batch_index, self.train_samples = int(state["batch_index"]), int(state["train_samples"])
        self.position = (int(state["epoch"]), int(state["batches_done_in_epoch"]))
        tracker = state["tracker"]
        self.tracker.history = {metric: list(values) for metric, values in tracker["history"].items()}
        self.tracker.reached = dict(tracker["reached"])
        self.tracker.reached_epoch = dict(tracker["reached_epoch"])
        if state["last_evaluation"] is not None:
            self.last_evaluation = Evaluation(**{**state["last_evaluation"],
                                                 "targets": tuple(state["last_evaluation"]["targets"])})
        self.statistics = TrainingStatistics.from_metrics(self.folder.metrics, state["step_cpu_seconds"])
        self.resumes = [*state.get("resumes", []), {
            "segment": self.segment, "checkpoint": self.folder.relative(point.checkpoint),
            "batch": point.batch_index, "interrupted_at_s": round(self.interrupted_at, 4),
            "lost_s": round(self.interrupted_at - state["clock_s"], 4)}]

    def _save_final_checkpoint(self, epoch: int) -> None:
        """After run_stop, off the clock: the weights the final evaluation scores, which `benchbase
        verify` loads to re-evaluate them."""
        path = self.recorder.final_checkpoint(self.backend.save_checkpoint)
        self._log_checkpoint(path, {constants.EPOCH_NUM: epoch, "final": True})

    def _log_sentences(self, epoch: int, batch: Batch) -> None:
        log_probs, lengths = self.backend.predict(batch.inputs())
        hypotheses = greedy_decode(log_probs, lengths, self.workload.model.ctc_blank_index)
        for index in range(min(SENTENCES_PER_LOG, batch.size)):
            self.recorder.training_sentence({
                "epoch": epoch, "batch": self.batch_index, "t": round(self.clock.seconds(), 3),
                "id": batch.utterance_ids[index], "reference": batch.transcripts[index],
                "hypothesis": hypotheses[index],
            })

    def _out_of_time(self) -> bool:
        return self.clock.seconds() >= self.workload.max_minutes * 60

    # --- evaluation ---------------------------------------------------------------------

    def _evaluate(self, epoch: int) -> Evaluation:
        started = self.clock.seconds()
        self.log.start(constants.EVAL_START, metadata={constants.EPOCH_NUM: epoch})
        self.hook.eval_started(epoch=epoch, batches=sum(len(data) for data in self.dev_data.values()))
        results = evaluate_subsets(self.backend, self.dev_data, self.decoder, self.workload.model)
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
        scored = results[self.workload.scored_subset]
        self.tracker.update(epoch, finished, scored.rates())
        evaluation = Evaluation(epoch, finished, scored.subset, scored.wer, scored.cer, scored.paper_cer, scored.loss,
                                scored.utterances, finished - started, dict(self.tracker.reached),
                                tuple(target.label for target in self.workload.tta.targets),
                                {subset: result.rates() for subset, result in results.items()})
        self.recorder.evaluation(epoch, finished, scored.subset, _subset_records(results), finished - started)
        self.last_evaluation = evaluation
        self.hook.eval_completed(evaluation=evaluation)
        return evaluation

    def _final_evaluation(self) -> None:
        """After run_stop, off the clock (as MLPerf and the paper do): the trained model on every
        dev and test subset at the final decoder's width, the paper's Table 5, in the run's
        precision; for a run not in fp32, the same weights once more in fp32."""
        if self.last_evaluation is None:
            return  # nothing was trained far enough to be evaluated
        workload, evaluation = self.workload, self.workload.evaluation
        decoder_name = evaluation.final_decoder or evaluation.decoder
        beam_width = evaluation.final_beam_width or evaluation.beam_width
        decoder = evaluation_decoder(evaluation.model_copy(update={"decoder": decoder_name}), self.config.data,
                                     workload.data.train, blank=workload.model.ctc_blank_index, beam_width=beam_width)
        # A store prepared without some test subset still gets the others; `benchbase check`
        # reports the missing ones (rule final_evaluation).
        subsets = [subset for subset in workload.data.dev + workload.data.test if self.store.has(subset)]
        pipelines = {subset: self._pipeline((subset,), training=False) for subset in subsets}
        started = time.perf_counter()
        results = evaluate_subsets(self.backend, pipelines, decoder, workload.model)
        for subset, result in results.items():
            self.log.event(own_keys.FINAL_ACCURACY, value=result.rates(),
                           metadata={own_keys.SUBSET: subset, own_keys.EVAL_DECODER: decoder_name,
                                     own_keys.EVAL_BEAM_WIDTH: beam_width, "utterances": result.utterances})
            self.recorder.decoded(self.folder.decoded_final(subset), result.references, result.hypotheses)
        self.final_evaluation = {"decoder": decoder_name, "beam_width": beam_width,
                                 "epoch": self.last_evaluation.epoch,
                                 "seconds": round(time.perf_counter() - started, 3),
                                 "precision": workload.model.precision,
                                 "subsets": _subset_records(results)}
        if workload.model.precision == "fp32":
            return
        # The cost of the run's precision made visible: the same weights evaluated in FP32 by a
        # second instance of the backend, built with the run's context at fp32 (every backend
        # implements fp32), given the exported weights less the quantizer's ranges.
        started = time.perf_counter()
        context = fp32_context(self.context)
        twin = self.backend_class()
        try:
            weights = self.backend.export_weights()
            twin.build(context)
            twin.import_weights({name: weights[name] for name in weight_layout(context.model,
                                                                               context.feature_dimension)})
            fp32_results = evaluate_subsets(twin, pipelines, decoder, context.model)
        except Exception as error:  # noqa: BLE001  (the timed run stands; result.json says why this is missing)
            self.final_evaluation["fp32"] = {"error": f"{type(error).__name__}: {str(error)[:500]}"}
            return
        finally:
            twin.close()
        for subset, result in fp32_results.items():
            self.log.event(own_keys.FINAL_ACCURACY_FP32, value=result.rates(),
                           metadata={own_keys.SUBSET: subset, own_keys.PRECISION: "fp32",
                                     own_keys.EVAL_DECODER: decoder_name, own_keys.EVAL_BEAM_WIDTH: beam_width,
                                     "utterances": result.utterances})
            self.recorder.decoded(self.folder.decoded_final(subset, fp32=True), result.references, result.hypotheses)
        self.final_evaluation["fp32"] = {"seconds": round(time.perf_counter() - started, 3),
                                         "subsets": _subset_records(fp32_results)}

    # --- the result ---------------------------------------------------------------------

    def _result(self, timed: TimedRun, epochs: int, init_seconds: float, run_seconds: float) -> RunResult:
        last = self.last_evaluation
        cores = self.statistics.cpu_cores_in_steps()
        return RunResult(
            status=timed.status, stop_reason=str(timed.reason), workload=self.workload.name,
            backend=self.config.backend, hardware=self.config.hardware.name, seed=self.config.seed, tta=self._tta(),
            epochs=epochs, batches=self.batch_index, train_samples=self.train_samples,
            run_seconds=round(run_seconds, 3), init_seconds=round(init_seconds, 3),
            parameter_count=self.parameter_count,
            throughput=self.statistics.throughput(), data_wait=self.statistics.data_wait(),
            last_evaluation=None if last is None else {"epoch": last.epoch, "subset": last.subset, **last.subsets[last.subset],
                                                        "subsets": last.subsets},
            final_evaluation=self.final_evaluation,
            telemetry=timed.telemetry, device=self.device_description,
            devices=self.devices, world_size=self.plan.world_size, resumes=self.resumes, division=self.config.division,
            device_plan=plan_record(self.plan, self.config.hardware), step_breakdown=self.statistics.step_breakdown(),
            environment=self.environment,
            cpu={"cores_in_steps": cores, "thread_budget": self._thread_budget(),
                 "within_budget": cores <= self._thread_budget() + THREAD_BUDGET_ALLOWANCE, **self.environment["cpu"]},
        )

    def _tta(self) -> dict[str, dict | None]:
        tta: dict[str, dict | None] = {}
        for target in self.workload.tta.targets:
            seconds = self.tracker.reached.get(target.label)
            tta[target.label] = None if seconds is None else {
                "seconds": round(seconds, 3), "minutes": round(seconds / 60, 4),
                "epoch": self.tracker.reached_epoch[target.label],
            }
        return tta


def _subset_records(results: dict[str, SubsetEvaluation]) -> dict[str, dict]:
    return {subset: {**result.rates(), "utterances": result.utterances} for subset, result in results.items()}


def _named(utterance_ids: list[str], shown: int = 8) -> str:
    more = len(utterance_ids) - shown
    return ", ".join(utterance_ids[:shown]) + (f" and {more} more" if more > 0 else "")


def _close_quietly(backend: Backend | None) -> None:
    """Close the backend while another error is on its way out: that error is the one to report."""
    if backend is None:
        return
    try:
        backend.close()
    except Exception:  # noqa: S110 - the error already propagating says what went wrong
        pass
