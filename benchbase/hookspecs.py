"""Hook specifications: the plugin author's reference.

Two kinds of hooks. Registration hooks receive a ``register`` callback and call it once per
object they contribute. Lifecycle hooks are broadcast to every plugin while a run goes on;
their return values are ignored. A lifecycle hook that raises stops the run like any other
error: the log ends with run_stop, status aborted, stop_reason error and the error's text,
the telemetry sampler stops and the backend is closed; the exception then reaches the caller.
Lifecycle hooks run in the training process, on the run clock (except run_finished).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from benchbase.backend import Backend, BackendReference
    from benchbase.harness.hook_payloads import BatchProgress, Evaluation
    from benchbase.specs import HardwareProfile, RunConfig, RunResult, WorkloadSpec
    from benchbase.specs.strategy import StrategyDefinition

__all__ = ["hookspec"]

hookspec = pluggy.HookspecMarker("benchbase")


# -------------------------------------------------------------------------------------------
# Registration hooks
# -------------------------------------------------------------------------------------------


@hookspec
def register_backends(register: Callable[[type[Backend] | BackendReference], None]) -> None:
    """Contribute backends.

    Called once per plugin manager, when the registry is first collected.

    :param register: call ``register(BackendReference(name, "module:Class"))`` for each
        backend (the module is imported only when a run asks for that backend, so a framework
        never loads for `benchbase plugins` or `check`), or ``register(BackendSubclass)``
        when the class is cheap to import. The ``name`` is what users pass to ``--backend``.
        Registering a name twice is an error.
    """


@hookspec
def register_workloads(register: Callable[[WorkloadSpec], None]) -> None:
    """Contribute workloads.

    Called once per plugin manager, when the registry is first collected.

    :param register: call ``register(workload_spec)`` for each ``WorkloadSpec``; its
        ``name`` is what users pass to ``--workload``.
    """


@hookspec
def register_hardware_profiles(register: Callable[[HardwareProfile], None]) -> None:
    """Contribute hardware profiles.

    Called once per plugin manager, when the registry is first collected.

    :param register: call ``register(hardware_profile)`` for each ``HardwareProfile``;
        its ``name`` is what users pass to ``--hw``.
    """


@hookspec
def register_strategies(register: Callable[[StrategyDefinition], None]) -> None:
    """Contribute training strategies (how the learners of a data-parallel run combine their work).

    Called once per plugin manager, when the registry is first collected.

    :param register: call ``register(StrategyDefinition(name, SpecClass, description, ...))``
        for each strategy; ``name`` is what users pass to ``--strategy`` and ``SpecClass`` (a
        ``benchbase.specs.strategy.StrategySpec`` subclass) its parameters, set with
        ``--set strategy.FIELD=VALUE``. A backend carries a strategy out where its
        ``Capabilities.strategies`` names it; a run with any other is refused before the clock.
    """


# -------------------------------------------------------------------------------------------
# Lifecycle hooks
# -------------------------------------------------------------------------------------------


@hookspec
def run_started(config: RunConfig, run_dir: Path) -> None:
    """The run clock has started (MLLOG run_start), just before the backend's ``build()``.

    Called once per run.

    :param config: the resolved run configuration.
    :param run_dir: the run folder the harness writes to.
    """


@hookspec
def batch_completed(progress: BatchProgress) -> None:
    """A training batch finished. Called on the training loop's thread: keep it cheap.

    Called once per batch, after the batch's metrics line and any checkpoint were written.

    :param progress: epoch, batch counters, run-clock seconds, loss, throughput, data wait.
    """


@hookspec
def eval_started(epoch: int, batches: int) -> None:
    """An evaluation on the dev split begins (MLLOG eval_start).

    Called every ``evaluation.every_epochs`` epochs, before the first dev batch is predicted.

    :param epoch: the epoch just trained (1-based).
    :param batches: dev batches to decode.
    """


@hookspec
def eval_batch_completed(subset: str, done: int, batches: int) -> None:
    """A dev batch of the evaluation under way was predicted. Called on the evaluation's thread: keep it cheap.

    Called once per dev batch, between eval_started and eval_completed (the batches' texts are
    decoded in the background, so the last may still be decoding).

    :param subset: the dev subset the batch is from.
    :param done: batches predicted so far in this evaluation, every subset's (1 to ``batches``).
    :param batches: dev batches to decode, as eval_started said.
    """


@hookspec
def eval_completed(evaluation: Evaluation) -> None:
    """An evaluation on the dev split finished and its metrics are known.

    Called after eval_stop is logged and the decoded outputs are written.

    :param evaluation: epoch, run-clock seconds, WER/CER and the targets reached so far.
    """


@hookspec
def checkpoint_saved(path: Path, batch_index: int) -> None:
    """A checkpoint was written atomically.

    Called every ``evaluation.checkpoint_every`` batches, right after the rename.

    :param path: the checkpoint file.
    :param batch_index: training batches completed when it was written.
    """


@hookspec
def run_finished(result: RunResult) -> None:
    """The run stopped (MLLOG run_stop) with status success or aborted, off the clock.

    Called once, after result.json is written; not called when the run ended with an error.

    :param result: what goes into result.json: TTA per target, status, totals.
    """
