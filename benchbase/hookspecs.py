"""Hook specifications: the plugin author's reference.

Two kinds of hooks. Registration hooks receive a ``register`` callback and call it once per
object they contribute. Lifecycle hooks are broadcast to every plugin while a run goes on;
their return values are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from benchbase.backend import Backend
    from benchbase.harness.events import BatchProgress, Evaluation, RunResult
    from benchbase.specs import HardwareProfile, RunConfig, WorkloadSpec

__all__ = ["hookspec"]

hookspec = pluggy.HookspecMarker("benchbase")


# -------------------------------------------------------------------------------------------
# Registration hooks
# -------------------------------------------------------------------------------------------


@hookspec
def register_backends(register: Callable[[type[Backend]], None]) -> None:
    """Contribute backends.

    Called once per plugin manager, when the registry is first collected.

    :param register: call ``register(BackendSubclass)`` for each backend; the class's
        ``name`` is what users pass to ``--backend``. Registering a name twice is an error.
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


# -------------------------------------------------------------------------------------------
# Lifecycle hooks
# -------------------------------------------------------------------------------------------


@hookspec
def run_started(config: RunConfig, run_dir: Path) -> None:
    """The run clock has started (MLLOG run_start), just before the model is built.

    :param config: the resolved run configuration.
    :param run_dir: the run folder the harness writes to.
    """


@hookspec
def batch_completed(progress: BatchProgress) -> None:
    """A training batch finished. Called on the training loop's thread: keep it cheap.

    :param progress: epoch, batch counters, run-clock seconds, loss, throughput, data wait.
    """


@hookspec
def eval_started(epoch: int, batches: int) -> None:
    """An evaluation on the dev split begins (MLLOG eval_start).

    :param epoch: the epoch just trained (1-based).
    :param batches: dev batches to decode.
    """


@hookspec
def eval_completed(evaluation: Evaluation) -> None:
    """An evaluation on the dev split finished and its metrics are known.

    :param evaluation: epoch, run-clock seconds, WER/CER and the targets reached so far.
    """


@hookspec
def checkpoint_saved(path: Path, batch_index: int) -> None:
    """A checkpoint was written atomically.

    :param path: the checkpoint file.
    :param batch_index: training batches completed when it was written.
    """


@hookspec
def run_finished(result: RunResult) -> None:
    """The run stopped (MLLOG run_stop) with status success or aborted.

    :param result: what goes into result.json: TTA per target, status, totals.
    """
