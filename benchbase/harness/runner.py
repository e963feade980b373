"""The harness state machine (paper section 4.4.2).

    init (not timed) -> run_start (the clock starts at model creation)
      -> train batches; every 50: greedy-decode the batch's sentences; every 250: checkpoint
      -> every epoch: evaluate on dev, WER/CER, update TTA
      -> run_stop: success when every target is reached, aborted at max epochs / minutes
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict

import pluggy

from benchbase import __version__
from benchbase.atomic import atomic_write_text
from benchbase.backend import Backend, Batch, DevicePlan
from benchbase.compliance import ComplianceLog
from benchbase.compliance.log import constants
from benchbase.data.pipeline import BatchPipeline, EpochBatches
from benchbase.data.store import FeatureStore
from benchbase.decode import BackgroundDecoding, evaluation_decoder, greedy_decode
from benchbase.harness.clock import RunClock
from benchbase.harness.events import BatchProgress, Evaluation, RunResult
from benchbase.harness.run_folder import RunFolder, write_json_line
from benchbase.metrics import TargetTracker, error_rates
from benchbase.specs import RunConfig
from benchbase.telemetry import TelemetrySampler

__all__ = ["Harness", "device_plan", "run_benchmark"]

SENTENCES_PER_LOG = 3
CHECKPOINTS_KEPT = 2


def run_benchmark(config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend]) -> RunResult:
    return Harness(config, manager, backend_class).run()


class Harness:
    def __init__(self, config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend]) -> None:
        self.config = config
        self.workload = config.workload
        self.hook = manager.hook
        self.backend_class = backend_class
        self.clock = RunClock()
        self.folder = RunFolder.create(config.out)
        self.tracker = TargetTracker(self.workload.tta)
        self.batch_index = 0
        self.train_samples = 0
        self.step_throughputs: list[float] = []
        self.data_waits: list[float] = []
        self.step_seconds: list[float] = []
        self.last_evaluation: Evaluation | None = None

    # --- the run ------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.log = ComplianceLog(self.folder.compliance_log)
        try:
            return self._run()
        finally:
            self.log.close()

    def _run(self) -> RunResult:
        init_started = time.perf_counter()
        self._initialize()
        init_seconds = time.perf_counter() - init_started
        self.log.end(constants.INIT_STOP)
        self.clock.start()
        self.log.start(constants.RUN_START)
        self.sampler = TelemetrySampler(self.folder.telemetry, self.clock.origin)
        self.sampler.start()
        self.hook.run_started(config=self.config, run_dir=self.folder.root)
        try:
            self.backend.build(self.workload.model, self.workload.optimizer, self.store.feature_dimension,
                               self.plan, self.config.seed)
            epochs, reason = self._train()
        except BaseException as error:
            # The log still closes the run, so it stays well-formed and says why it ended.
            self.log.end(constants.RUN_STOP, metadata={constants.STATUS: constants.ABORTED,
                                                       "error": f"{type(error).__name__}: {error}"})
            raise
        finally:
            telemetry = self.sampler.stop()
            self.metrics_sink.close()
            self.sentence_sink.close()
        status = constants.SUCCESS if self.tracker.all_reached else constants.ABORTED
        self.log.end(constants.RUN_STOP, metadata={constants.STATUS: status})
        result = self._result(status, reason, epochs, init_seconds, telemetry)
        self.folder.write_json(self.folder.result, asdict(result))
        self.hook.run_finished(result=result)
        return result

    def _initialize(self) -> None:
        self.log.event(constants.CACHE_CLEAR, value=True)
        self.log.start(constants.INIT_START)
        self.folder.write_json(self.folder.config, self.config.model_dump(mode="json"))
        self.store = FeatureStore(self.config.data)
        self.train_data, self.dev_data = self._pipelines()
        self.plan = device_plan(self.config)
        # Built in init, off the clock: the language model and the decoder's compiled kernel.
        self.decoder = evaluation_decoder(self.workload.evaluation, self.config.data, self.workload.data.train,
                                          blank=self.workload.model.ctc_blank_index)
        self.backend = self.backend_class()
        self.metrics_sink = self.folder.append_lines(self.folder.metrics)
        self.sentence_sink = self.folder.append_lines(self.folder.sentences)
        self._log_submission()

    def _pipelines(self) -> tuple[BatchPipeline, BatchPipeline]:
        pipeline, data = self.config.hardware.pipeline, self.workload.data
        train = BatchPipeline(self.store, data.train, pipeline.global_batch, pipeline.readers, pipeline.buffer,
                              pipeline.shuffle_buffer, shuffle=True, drop_last=True, seed=self.config.seed,
                              length_buckets=data.length_buckets, pad_to_frames=data.pad_to_frames)
        dev = BatchPipeline(self.store, data.dev, pipeline.global_batch, pipeline.readers, pipeline.buffer,
                            shuffle=False, drop_last=False, seed=self.config.seed, pad_to_frames=data.pad_to_frames)
        return train, dev

    def _log_submission(self) -> None:
        hardware, optimizer = self.config.hardware, self.workload.optimizer
        # Everything the workload pins goes into the log, so `benchbase check` can compare it.
        for key, value in (
            (constants.SUBMISSION_ORG, self.config.submitter),
            (constants.SUBMISSION_PLATFORM, hardware.name),
            (constants.SUBMISSION_DIVISION, "open"),
            (constants.SUBMISSION_STATUS, "research"),
            (constants.SUBMISSION_BENCHMARK, self.workload.name),
            (constants.SUBMISSION_ENTRY, f"benchbase {__version__} backend={self.config.backend}"),
            (constants.SEED, self.config.seed),
            (constants.GLOBAL_BATCH_SIZE, hardware.pipeline.global_batch),
            (constants.GRADIENT_ACCUMULATION_STEPS, 1),
            (constants.TRAIN_SAMPLES, self.train_data.utterances),
            (constants.EVAL_SAMPLES, self.dev_data.utterances),
            (constants.OPT_NAME, optimizer.name),
            (constants.OPT_BASE_LR, optimizer.learning_rate),
            ("opt_adadelta_rho", optimizer.rho),
            ("opt_adadelta_epsilon", optimizer.epsilon),
            (constants.OPT_GRADIENT_CLIP_NORM, optimizer.gradient_clip_norm),
            ("eval_decoder", self.workload.evaluation.decoder),
            ("eval_beam_width", self.workload.evaluation.beam_width),
        ):
            self.log.event(key, value=value)

    # --- training -----------------------------------------------------------------------

    def _train(self) -> tuple[int, str]:
        upcoming: EpochBatches | None = self.train_data.epoch(1)
        try:
            for epoch in range(1, self.workload.max_epochs + 1):
                self.log.start(constants.EPOCH_START, metadata={constants.EPOCH_NUM: epoch})
                batches, upcoming = upcoming, None
                finished_epoch = self._train_epoch(epoch, batches)
                batches.close()
                if finished_epoch and epoch < self.workload.max_epochs:
                    # The next epoch's readers fill its shuffle buffer while this one is evaluated.
                    upcoming = self.train_data.epoch(epoch + 1)
                self.log.end(constants.EPOCH_STOP, metadata={constants.EPOCH_NUM: epoch})
                if not finished_epoch:
                    return epoch, "max_minutes"
                if epoch % self.workload.evaluation.every_epochs == 0:
                    self._evaluate(epoch)
                    if self.tracker.all_reached:
                        return epoch, "targets_reached"
                if self._out_of_time():
                    return epoch, "max_minutes"
            return self.workload.max_epochs, "max_epochs"
        finally:
            if upcoming is not None:
                upcoming.close()

    def _train_epoch(self, epoch: int, batches: EpochBatches) -> bool:
        """Train one epoch; False when the time limit stopped it early."""
        for batch_in_epoch in range(1, len(self.train_data) + 1):
            waited_from = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            step_from = time.perf_counter()
            loss = self.backend.train_step(batch)
            step_to = time.perf_counter()
            self._after_batch(epoch, batch_in_epoch, batch, loss, step_from - waited_from, step_to - step_from)
            if self._out_of_time():
                return False
        return True

    def _after_batch(self, epoch: int, batch_in_epoch: int, batch: Batch, loss: float, wait: float,
                     step: float) -> None:
        self.batch_index += 1
        self.train_samples += batch.size
        throughput = batch.size / (wait + step)
        self.step_throughputs.append(throughput)
        self.data_waits.append(wait)
        self.step_seconds.append(step)
        progress = BatchProgress(epoch, batch_in_epoch, len(self.train_data), self.batch_index, self.clock.seconds(),
                                 loss, throughput, wait)
        write_json_line(self.metrics_sink, {
            "kind": "batch", "epoch": epoch, "batch": self.batch_index, "t": round(progress.seconds, 4),
            "loss": loss, "step_s": round(step, 5), "wait_s": round(wait, 5), "throughput": round(throughput, 3),
            "utterances": batch.size,
        })
        evaluation = self.workload.evaluation
        if self.batch_index % evaluation.log_sentences_every == 0:
            self._log_sentences(epoch, batch)
        if self.batch_index % evaluation.checkpoint_every == 0:
            self._checkpoint()
        self.hook.batch_completed(progress=progress)

    def _log_sentences(self, epoch: int, batch: Batch) -> None:
        log_probs, lengths = self.backend.predict(batch)
        hypotheses = greedy_decode(log_probs, lengths, self.workload.model.ctc_blank_index)
        for index in range(min(SENTENCES_PER_LOG, batch.size)):
            write_json_line(self.sentence_sink, {
                "epoch": epoch, "batch": self.batch_index, "t": round(self.clock.seconds(), 3),
                "id": batch.utterance_ids[index], "reference": batch.transcripts[index],
                "hypothesis": hypotheses[index],
            })

    def _checkpoint(self) -> None:
        final = self.folder.checkpoints / f"batch-{self.batch_index:07d}.ckpt"
        temporary = final.with_name(f".{final.name}.tmp")
        self.backend.save_checkpoint(temporary)
        temporary.replace(final)
        for stale in sorted(self.folder.checkpoints.glob("batch-*.ckpt"))[:-CHECKPOINTS_KEPT]:
            stale.unlink()
        self.hook.checkpoint_saved(path=final, batch_index=self.batch_index)

    def _out_of_time(self) -> bool:
        return self.clock.seconds() >= self.workload.max_minutes * 60

    # --- evaluation ---------------------------------------------------------------------

    def _evaluate(self, epoch: int) -> Evaluation:
        started = self.clock.seconds()
        self.log.start(constants.EVAL_START, metadata={constants.EPOCH_NUM: epoch})
        self.hook.eval_started(epoch=epoch, batches=len(self.dev_data))
        references = []
        decoding = BackgroundDecoding(self.decoder)  # decodes batch n while the backend predicts n + 1
        for batch in self.dev_data.epoch(0):
            decoding.submit(*self.backend.predict(batch))
            references += batch.transcripts
        hypotheses = decoding.results()
        rates = error_rates(references, hypotheses)
        accuracy = {"wer": round(rates.wer, 4), "cer": round(rates.cer, 4), "paper_cer": round(rates.paper_cer, 4)}
        self.log.event(constants.EVAL_ACCURACY, value=accuracy, metadata={constants.EPOCH_NUM: epoch})
        self.log.end(constants.EVAL_STOP, metadata={constants.EPOCH_NUM: epoch})
        finished = self.clock.seconds()
        self.tracker.update(epoch, finished, rates.wer, rates.cer)
        evaluation = Evaluation(epoch, finished, rates.wer, rates.cer, rates.paper_cer, rates.utterances,
                                finished - started, dict(self.tracker.reached),
                                tuple(target.label for target in self.workload.tta.targets))
        write_json_line(self.metrics_sink, {"kind": "eval", "epoch": epoch, "t": round(finished, 4), **accuracy,
                                            "eval_s": round(finished - started, 4), "utterances": rates.utterances})
        self._write_eval_sentences(epoch, references, hypotheses)
        self.last_evaluation = evaluation
        self.hook.eval_completed(evaluation=evaluation)
        return evaluation

    def _write_eval_sentences(self, epoch: int, references: list[str], hypotheses: list[str]) -> None:
        path = self.folder.root / "decoded" / f"dev-epoch-{epoch:03d}.jsonl"
        lines = "".join(
            json.dumps({"reference": reference, "hypothesis": hypothesis}) + "\n"
            for reference, hypothesis in zip(references, hypotheses)
        )
        atomic_write_text(path, lines)

    # --- the result ---------------------------------------------------------------------

    def _result(self, status: str, reason: str, epochs: int, init_seconds: float, telemetry: dict) -> RunResult:
        tta = {}
        for target in self.workload.tta.targets:
            seconds = self.tracker.reached.get(target.label)
            tta[target.label] = None if seconds is None else {
                "seconds": round(seconds, 3), "minutes": round(seconds / 60, 4),
                "epoch": self.tracker.reached_epoch[target.label],
            }
        final = self.last_evaluation
        return RunResult(
            status=status, stop_reason=reason, workload=self.workload.name, backend=self.config.backend,
            hardware=self.config.hardware.name, seed=self.config.seed, tta=tta, epochs=epochs,
            batches=self.batch_index, train_samples=self.train_samples, run_seconds=round(self.clock.seconds(), 3),
            init_seconds=round(init_seconds, 3), parameter_count=self.backend.parameter_count(),
            throughput=_summary(self.step_throughputs), data_wait=_wait_summary(self.data_waits, self.step_seconds),
            final_evaluation=None if final is None else {"epoch": final.epoch, "wer": final.wer, "cer": final.cer,
                                                          "paper_cer": final.paper_cer},
            telemetry=telemetry, device=self.backend.device_description(),
        )


def device_plan(config: RunConfig) -> DevicePlan:
    hardware = config.hardware
    kind = "cuda" if config.device == "cuda" or (config.device == "auto" and hardware.devices.kind == "gpu") else "cpu"
    return DevicePlan(kind=kind, count=hardware.devices.count if kind == "cuda" else 1,
                      batch_per_device=hardware.pipeline.batch_per_device, threads=hardware.pipeline.threads)


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"median": round(statistics.median(values), 3), "mean": round(statistics.fmean(values), 3)}


def _wait_summary(waits: list[float], steps: list[float]) -> dict[str, float]:
    if not waits:
        return {}
    total = sum(waits) + sum(steps)
    return {"median_s": round(statistics.median(waits), 5), "total_s": round(sum(waits), 3),
            "share_of_step_time": round(sum(waits) / total, 5)}
