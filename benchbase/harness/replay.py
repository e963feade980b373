"""Replaying a finished run: its configuration and a checkpoint back into its backend, and the
backend's outputs on a dev or test subset, batched by the harness's own pipeline.

`benchbase decode-sweep`, `benchbase verify` and benchmarks/decoders.py all start here, so a
replay sees the batches, the build context and the device plan the run itself had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from benchbase.backend import Backend
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.errors import InputError, UnreadableFile, describe_validation_error
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.harness.devices import device_plan
from benchbase.harness.evaluation import predicted_log_probs
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig
from benchbase.specs.strategy import SyncSpec

__all__ = ["DevOutputs", "dev_outputs", "load_checkpoint", "load_run_config", "newest_checkpoint",
           "replay_pipeline", "restored_backend"]


@dataclass(frozen=True)
class DevOutputs:
    """The acoustic model's dev-set outputs, computed once and decoded many times."""

    batches: list[tuple[np.ndarray, np.ndarray]]
    references: list[str]


def load_run_config(run_dir: Path) -> RunConfig:
    path = RunFolder(run_dir).config
    if not path.is_file():
        raise InputError(f"{run_dir}: not a run folder (no {path.name})")
    try:
        return RunConfig.model_validate_json(path.read_bytes())
    except OSError as error:
        raise UnreadableFile(path, error) from None
    except ValidationError as error:
        raise InputError(describe_validation_error(str(path), error)) from None


def newest_checkpoint(run_dir: Path) -> Path:
    """The final checkpoint (written after run_stop), else the newest periodic one."""
    folder = RunFolder(run_dir)
    if folder.final_checkpoint.is_file():
        return folder.final_checkpoint
    periodic = folder.periodic_checkpoints()
    if not periodic:
        raise InputError(f"{run_dir}: no checkpoint in {folder.checkpoints}")
    return periodic[-1]


def load_checkpoint(backend: Backend, checkpoint: Path) -> None:
    """The backend loads the checkpoint; a truncated, empty or foreign file is a one-line error."""
    try:
        backend.load_checkpoint(checkpoint)
    except Exception as error:  # noqa: BLE001 - every framework raises its own kind for a bad file
        message = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise InputError(f"{checkpoint}: not a checkpoint this backend can load ({message})") from None


@contextmanager
def restored_backend(config: RunConfig, store: FeatureStore, checkpoint: Path) -> Iterator[Backend]:
    """The run's backend, built as the run built it and holding the checkpoint's weights; closed on exit."""
    backend = collect_registry(get_plugin_manager()).backend(config.backend)()
    try:
        # One process that predicts: whatever strategy its learners trained with, there is nothing to combine.
        context = build_context(config, store, device_plan(config.hardware, config.device))
        backend.build(dataclasses.replace(context, strategy=SyncSpec()))
        load_checkpoint(backend, checkpoint)
        yield backend
    finally:
        backend.close()


def replay_pipeline(config: RunConfig, store: FeatureStore, subset: str) -> BatchPipeline:
    """One subset in the order and batches the run evaluated it in."""
    return run_pipeline(config, store, (subset,), training=False)


def dev_outputs(config: RunConfig, checkpoint: Path, store_root: Path, subset: str | None = None) -> DevOutputs:
    """Build the run's backend, load the checkpoint and predict one subset (default: the scored dev subset)
    once, in order."""
    store = FeatureStore(store_root)
    pipeline = replay_pipeline(config, store, subset or config.workload.scored_subset)
    batches: list[tuple[np.ndarray, np.ndarray]] = []
    references: list[str] = []
    with restored_backend(config, store, checkpoint) as backend:
        epoch = pipeline.epoch(0)
        try:
            for batch in epoch:
                batches.append((predicted_log_probs(backend, batch.inputs()), batch.output_lengths))
                references += batch.transcripts
        finally:
            epoch.close()  # a failed predict must not leave the reader thread waiting on a full queue
    return DevOutputs(batches, references)
