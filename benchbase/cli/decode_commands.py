"""`benchbase decode-sweep`: re-decode a run's dev set at several beam widths (paper, Table 3)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from benchbase.cli.app import cli
from benchbase.data.pipeline import pad_batch
from benchbase.data.store import FeatureStore
from benchbase.decode import evaluation_decoder
from benchbase.errors import InputError, describe_validation_error
from benchbase.harness.plan import build_context, device_plan
from benchbase.metrics import error_rates
from benchbase.plugins import get_plugin_manager
from benchbase.registry import collect_registry
from benchbase.specs import BEAM_DECODERS, RunConfig

__all__ = ["MAX_BEAM_WIDTH", "DevOutputs", "decode_sweep", "dev_outputs", "load_checkpoint", "load_run_config",
           "newest_checkpoint", "sweep_row"]

MAX_BEAM_WIDTH = 8192
"""The evaluation spec's own bound: wider beams take hours per dev set and memory without end."""


@dataclass(frozen=True)
class DevOutputs:
    """The acoustic model's dev-set outputs, computed once and decoded many times."""

    batches: list[tuple[np.ndarray, np.ndarray]]
    references: list[str]


@cli.command("decode-sweep")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--beams", default="64,128,256,512", show_default=True, help="Comma-separated beam widths.")
@click.option("--decoder", type=click.Choice(BEAM_DECODERS),
              help="Decoder to sweep (default: the workload's, or word_beam where it evaluates greedily).")
@click.option("--data", type=click.Path(path_type=Path), help="Feature store (default: the one in config.json).")
@click.option("--subset", help="Dev or test subset to decode (default: the one TTA is scored on).")
def decode_sweep(run_dir: Path, beams: str, decoder: str | None, data: Path | None, subset: str | None) -> None:
    """Decode a subset from RUN_DIR's newest checkpoint at each beam width: seconds, WER, CER."""
    widths = _widths(beams)
    config = load_run_config(run_dir)
    subset = _subset(config, subset)
    outputs = dev_outputs(config, newest_checkpoint(run_dir), data or config.data, subset)
    evaluation = config.workload.evaluation
    name = decoder or (evaluation.decoder if evaluation.decoder != "greedy" else "word_beam")
    table = Table(title=f"{run_dir}: {name} on {len(outputs.references)} {subset} utterances")
    for column in ("beam width", "seconds", "WER %", "CER %", "CER/ref %"):
        table.add_column(column, justify="right")
    for width in widths:
        table.add_row(*sweep_row(config, data or config.data, name, width, outputs))
    Console().print(table)


def sweep_row(config: RunConfig, store: Path, name: str, width: int, outputs: DevOutputs) -> tuple[str, ...]:
    spec = config.workload.evaluation.model_copy(update={"decoder": name, "beam_width": width})
    decoder = evaluation_decoder(spec, store, config.workload.data.train, config.workload.model.ctc_blank_index)
    started = time.perf_counter()
    hypotheses = [text for log_probs, lengths in outputs.batches for text in decoder.decode(log_probs, lengths)]
    seconds = time.perf_counter() - started
    rates = error_rates(outputs.references, hypotheses)
    return str(width), f"{seconds:.2f}", f"{rates.wer:.2f}", f"{rates.paper_cer:.2f}", f"{rates.cer:.2f}"


def load_run_config(run_dir: Path) -> RunConfig:
    path = run_dir / "config.json"
    if not path.is_file():
        raise InputError(f"{run_dir}: not a run folder (no config.json)")
    try:
        return RunConfig.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as error:
        raise InputError(describe_validation_error(str(path), error)) from None


def newest_checkpoint(run_dir: Path) -> Path:
    """The final checkpoint (written after run_stop), else the newest periodic one."""
    final = run_dir / "checkpoints" / "final.ckpt"
    if final.is_file():
        return final
    checkpoints = sorted((run_dir / "checkpoints").glob("batch-*.ckpt"))
    if not checkpoints:
        raise InputError(f"{run_dir}: no checkpoint in {run_dir / 'checkpoints'}")
    return checkpoints[-1]


def dev_outputs(config: RunConfig, checkpoint: Path, store_root: Path, subset: str | None = None) -> DevOutputs:
    """Build the run's backend, load the checkpoint and predict one subset (default: the scored dev subset)
    once, in order."""
    store = FeatureStore(store_root)
    backend = collect_registry(get_plugin_manager()).backend(config.backend)()
    workload = config.workload
    try:
        backend.build(build_context(config, store, device_plan(config.hardware, config.device)))
        load_checkpoint(backend, checkpoint)
        subsets = (subset or workload.scored_subset,)
        utterances = [utterance for shard in store.shards(subsets) for utterance in store.read(shard)]
        size = config.hardware.pipeline.global_batch
        batches, references = [], []
        for start in range(0, len(utterances), size):
            batch = pad_batch(utterances[start : start + size], workload.model, workload.data.pad_to_frames)
            batches.append(backend.predict(batch.inputs()))
            references += batch.transcripts
    finally:
        backend.close()
    return DevOutputs(batches, references)


def _subset(config: RunConfig, subset: str | None) -> str:
    known = config.workload.data.dev + config.workload.data.test
    if subset is not None and subset not in known:
        raise InputError(f"--subset {subset!r}: the run's workload has {', '.join(known)}")
    return subset or config.workload.scored_subset


def load_checkpoint(backend, checkpoint: Path) -> None:
    """The backend loads the checkpoint; a truncated, empty or foreign file is a one-line error."""
    try:
        backend.load_checkpoint(checkpoint)
    except Exception as error:  # noqa: BLE001 - every framework raises its own kind for a bad file
        message = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise InputError(f"{checkpoint}: not a checkpoint this backend can load ({message})") from None


def _widths(text: str) -> list[int]:
    try:
        widths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        widths = []
    if not widths or min(widths) < 1 or max(widths) > MAX_BEAM_WIDTH:
        raise InputError(f"--beams {text!r}: expected widths from 1 to {MAX_BEAM_WIDTH} separated by commas, "
                         "e.g. 64,128,256")
    return widths
