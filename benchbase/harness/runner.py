"""The harness state machine (paper section 4.4.2).

    init (not timed) -> run_start (the clock starts at model creation)
      -> train batches; every 50: greedy-decode the batch's sentences; every 250: checkpoint
      -> every epoch: evaluate each dev subset on its own (WER, CER, paper CER, loss);
         update TTA from the workload's scored subset
      -> run_stop: success when every target is reached, aborted at max epochs / minutes
    final evaluation (not timed): every dev and test subset at the final decoder's width

``Harness`` controls the phases: init, the timed run, the final evaluation, the result.
``TrainingLoop`` trains, ``TimedRun`` closes the timed phase whatever happens, ``RunRecorder``
writes the run folder, ``TrainingProgress`` holds where training stands.
"""

from __future__ import annotations

import shutil
import time

import pluggy

from benchbase.backend import Backend
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.compliance.keys import constants
from benchbase.data.page_cache import drop_from_page_cache
from benchbase.data.registered import data_departures, store_data_record
from benchbase.harness.assembly import pad_into_backend_arrays
from benchbase.harness.backend_failure import backend_failure
from benchbase.harness.clock import RunClock
from benchbase.harness.devices import check_devices_in_use, device_plan, gpus_in_use, thread_budget
from benchbase.harness.final_evaluation import FinalEvaluation
from benchbase.harness.follower import follow
from benchbase.harness.host_memory import keep_host_memory_on_cpus
from benchbase.harness.initialization import RunInputs, open_store
from benchbase.harness.lifecycle import TimedRun
from benchbase.harness.progress import TrainingProgress
from benchbase.harness.recorder import RunRecorder
from benchbase.harness.result import Footprint, run_result
from benchbase.harness.resume import ResumePoint, Resumption
from benchbase.harness.submission import log_submission
from benchbase.harness.training import TrainingLoop
from benchbase.harness.unfinished import unfinished_after_run_stop
from benchbase.harness.warm_up import run_shapes, warm_up
from benchbase.harness.world import Coordinator, Solo
from benchbase.metrics import TargetTracker
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig, RunResult
from benchbase.telemetry import TelemetrySampler
from benchbase.telemetry.environment import run_environment

__all__ = ["Harness", "device_plan", "run_benchmark"]


def run_benchmark(config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend],
                  coordinator: Coordinator | None = None) -> RunResult | None:
    """One run; in a process-per-device world, rank 0 runs the harness (and gets the result) and
    the other ranks train beside it (and get None)."""
    if coordinator is not None and not coordinator.world.leader:
        follow(config, backend_class, coordinator)
        return None
    return Harness(config, manager, backend_class, coordinator).run()


class Harness:
    """One run on rank 0, from init to result.json: construct it, then ``run()`` once."""

    def __init__(self, config: RunConfig, manager: pluggy.PluginManager, backend_class: type[Backend],
                 coordinator: Coordinator | None = None, resume: ResumePoint | None = None) -> None:
        """``resume``: continue the run in ``config.out`` from this checkpoint (benchbase run --resume)."""
        self.config = config
        self.resume = resume
        self.coordinator: Coordinator = coordinator or Solo()
        self.hook = manager.hook
        self.backend_class = backend_class
        self.clock = RunClock()
        self.folder = RunFolder(config.out) if resume else RunFolder.create(config.out)
        self.timed = False
        """Whether the clock started (run_start, or a resume, is in the log): a fresh run that fails
        before leaves no folder behind."""
        self.stopped: str | None = None
        """run_stop's status, once the timed phase closed normally: a failure after it leaves a
        verdict in the log and no result (harness/unfinished.py)."""
        # Off the clock: what the run measured, for config.json, the log and result.json. A resumed
        # run keeps what it recorded at its init (`run --resume` refused any change but the machine's
        # identity: environment_changes), so that result.json says what the log says.
        recorded = config.environment if resume is not None else None
        self.environment = recorded or run_environment(config.backend, backend_class.__module__)

    def run(self) -> RunResult:
        # Before any file is opened: when the run was interrupted, then its files restart from
        # the checkpoint and the interrupted segment moves aside.
        resumption = None if self.resume is None else Resumption.begin(self.folder, self.resume)
        log = ComplianceLog(self.folder.compliance_log)
        recorder = RunRecorder(self.folder)
        try:
            result = self._run(log, recorder, resumption)
        except BaseException as error:
            self._close_files(log, recorder, quietly=True)  # the error on its way out is the one to report
            if not self.timed and self.resume is None:
                # Setup failed before run_start: nothing was measured, and the folder must not
                # block the same --out on the next attempt.
                shutil.rmtree(self.folder.root, ignore_errors=True)
            if isinstance(error, OSError) and self.stopped is not None:
                # run_stop's status stays in the log (the timed phase's verdict, as MLPerf's); the
                # one line says the result was not delivered, and how the run goes on.
                raise unfinished_after_run_stop(error, self.folder, self.stopped,
                                                self.coordinator.world.size) from error
            if isinstance(error, OSError) and error.filename is None:
                # A write to an open file (a full disk): name the run folder it went to.
                raise OSError(error.errno, error.strerror, str(self.folder.root)) from error
            failure = backend_failure(error, self.backend_class, self.config.backend,
                                      self.folder.traceback if self.folder.root.is_dir() else None)
            if failure is not None:
                raise failure from error
            raise
        self._close_files(log, recorder, quietly=False)
        return result

    def _close_files(self, log: ComplianceLog, recorder: RunRecorder, quietly: bool) -> None:
        for close in (recorder.close, log.close):
            try:
                close()
            except OSError as error:  # flushing the last lines can meet a full disk too
                if not quietly:
                    raise OSError(error.errno, error.strerror, str(self.folder.root)) from error

    def _run(self, log: ComplianceLog, recorder: RunRecorder, resumption: Resumption | None) -> RunResult:
        init_started = time.perf_counter()
        inputs = self._initialize(log, fresh=resumption is None)
        backend = self.backend_class()
        try:
            # The workload's rule: build and compile in init (MLPerf's allowance), or on the clock (the paper's).
            built_before_clock = self.config.workload.tta.compilation == "before_run_start"
            if built_before_clock:
                shapes = run_shapes(inputs.train_data, list(inputs.dev_data.values()), self.config.workload.max_epochs)
                warm_up(backend, self.config.backend, inputs.context, shapes, log)
            init_seconds = time.perf_counter() - init_started
            self._start_clock(log, resumption)
            sampler = TelemetrySampler(self.folder.telemetry, self.clock.origin,
                                       processes=self.coordinator.local_processes(),
                                       gpus=gpus_in_use(inputs.plan, self.backend_class.capabilities.process_model,
                                                        self.coordinator.world))
            with TimedRun(log, sampler, explain_failure=self.coordinator.peer_failure) as timed:
                self.hook.run_started(config=self.config, run_dir=self.folder.root)
                build_seconds = 0.0
                if not built_before_clock:
                    build_started = self.clock.seconds()
                    backend.build(inputs.context)
                    build_seconds = self.clock.seconds() - build_started
                devices = self._check_devices(log, backend, inputs)
                pad_into_backend_arrays(backend, inputs.train_data)
                progress = self._progress(backend, resumption)
                loop = TrainingLoop(self.config, self.hook, self.clock, log, recorder, self.coordinator, inputs,
                                    backend, progress, resumed=resumption is not None, build_seconds=build_seconds)
                reason, epochs = loop.train()
                footprint = Footprint(devices, backend.device_description(), backend.parameter_count())
                log.event(own_keys.CPU_CORES_IN_STEPS, value=progress.statistics.cpu_cores_in_steps(),
                          metadata={own_keys.THREAD_BUDGET: thread_budget(inputs.plan)})
                timed.finish(reason)
            self.stopped = timed.status
            run_seconds = self.clock.seconds()
            loop.save_final_checkpoint(epochs)
            final_evaluation = None
            # Without an evaluation, nothing was trained far enough to be evaluated.
            if self.config.final_evaluation and progress.last_evaluation is not None:
                final_evaluation = FinalEvaluation(self.config, inputs, backend, self.backend_class, log,
                                                   recorder).run(progress.last_evaluation.epoch)
        except BaseException:
            _close_quietly(backend)
            raise
        backend.close()
        result = run_result(self.config, self.environment, inputs.plan, timed, progress, footprint, epochs=epochs,
                            init_seconds=init_seconds, run_seconds=run_seconds, final_evaluation=final_evaluation)
        recorder.result(result)
        self.hook.run_finished(result=result)
        return result

    def _initialize(self, log: ComplianceLog, fresh: bool) -> RunInputs:
        """``fresh``: not a resumed run, whose log already holds its init."""
        store = open_store(self.config)
        departures = data_departures(self.config.workload, store_data_record(store.description))
        unlisted = [departure for departure in departures if departure not in self.config.open_changes]
        # An open run configured in code may list nothing of what it changed; a list begun here
        # would claim to be complete. The CLI's runs always carry their list.
        listing = self.config.division == "closed" or bool(self.config.open_changes)
        if unlisted and listing:
            # Another corpus, or a part of the registered one: a time to accuracy, but not the workload's.
            self.config = self.config.model_copy(update={"division": "open",
                                                         "open_changes": (*self.config.open_changes, *unlisted)})
        # MLPerf's cache_clear: the store's files leave the OS page cache, so the first epoch
        # reads from disk as a fresh machine's would. False where the OS refused.
        dropped = drop_from_page_cache(self.config.data)
        if fresh:
            log.event(constants.CACHE_CLEAR, value=dropped)
            log.start(constants.INIT_START)
            self.folder.write_json(self.folder.config, {**self.config.model_dump(mode="json"),
                                                        "environment": self.environment})
        inputs = RunInputs.assemble(self.config, store, self.backend_class, self.coordinator)
        keep_host_memory_on_cpus(inputs.plan)
        if fresh:
            log_submission(log, self.config, self.environment, inputs.plan, inputs.train_data, inputs.dev_data)
        return inputs

    def _start_clock(self, log: ComplianceLog, resumption: Resumption | None) -> None:
        if resumption is None:
            log.end(constants.INIT_STOP)
        self.coordinator.barrier()  # every rank is ready: the clock starts for all of them at once
        if resumption is None:
            self.clock.start()
            log.start(constants.RUN_START)
        else:
            resumption.start_clock(self.clock, log)
        self.timed = True

    def _check_devices(self, log: ComplianceLog, backend: Backend, inputs: RunInputs) -> list[str]:
        """Right after build(): the devices every rank trains on, on the record and as the plan says."""
        per_rank = self.coordinator.gather(list(backend.devices_in_use()))
        devices = [device for devices in per_rank for device in devices] if len(per_rank) == 1 else [
            f"rank {rank}: {device}" for rank, devices in enumerate(per_rank) for device in devices]
        log.event(own_keys.DEVICES, value=devices)
        check_devices_in_use(per_rank, inputs.plan, self.config.backend)
        return devices

    def _progress(self, backend: Backend, resumption: Resumption | None) -> TrainingProgress:
        """Right after build(): a resumed run's backend loads the checkpoint, and training goes on from its sidecar."""
        rule = self.config.workload.tta
        if resumption is None:
            return TrainingProgress(TargetTracker(rule))
        backend.load_checkpoint(resumption.point.checkpoint)
        return TrainingProgress.resumed(resumption.point.state, rule, self.folder.metrics, resumption.resumes())


def _close_quietly(backend: Backend) -> None:
    """Close the backend while another error is on its way out: that error is the one to report."""
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - the error already propagating says what went wrong
        pass
