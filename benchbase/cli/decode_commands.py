"""`benchbase decode-sweep`: re-decode a run's dev set at several beam widths (paper, Table 3)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console

from benchbase.cli.app import cli
from benchbase.cli.framework_logs import load_backend
from benchbase.cli.reporter import DecodeSweepReporter
from benchbase.decode import evaluation_decoder
from benchbase.errors import InputError
from benchbase.harness.replay import DevOutputs, dev_outputs, load_run_config, newest_checkpoint
from benchbase.metrics import error_rates
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import BEAM_DECODERS, RunConfig

__all__ = ["MAX_BEAM_WIDTH", "decode_sweep", "sweep_row"]

MAX_BEAM_WIDTH = 8192
"""The evaluation spec's own bound: wider beams take hours per dev set and memory without end."""


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
    checkpoint = newest_checkpoint(run_dir)
    store = data or config.data
    evaluation = config.workload.evaluation
    name = decoder or (evaluation.decoder if evaluation.decoder != "greedy" else "word_beam")
    load_backend(collect_registry(get_plugin_manager()), config.backend)  # its framework, imported quietly now
    with DecodeSweepReporter(Console()) as reporter:
        reporter.predicting(subset, checkpoint.name)
        outputs = dev_outputs(config, checkpoint, store, subset)
        reporter.decoding(f"{run_dir}: {name} on {len(outputs.references)} {subset} utterances")
        for width in widths:
            reporter.width_started(width, len(outputs.batches))
            reporter.width_finished(sweep_row(config, store, name, width, outputs, reporter.batch_decoded))


def sweep_row(config: RunConfig, store: Path, name: str, width: int, outputs: DevOutputs,
              batch_decoded: Callable[[], None] = lambda: None) -> tuple[str, ...]:
    """One beam width's row: decoding seconds and the error rates; ``batch_decoded`` after each batch."""
    spec = config.workload.evaluation.model_copy(update={"decoder": name, "beam_width": width})
    decoder = evaluation_decoder(spec, store, config.workload.data.train, config.workload.model.blank_index,
                                 tokens=config.workload.data.tokens)
    hypotheses: list[str] = []
    started = time.perf_counter()
    for log_probs, lengths in outputs.batches:
        hypotheses += decoder.decode(log_probs, lengths)
        batch_decoded()
    seconds = time.perf_counter() - started
    rates = error_rates(outputs.references, hypotheses)
    return str(width), f"{seconds:.2f}", f"{rates.wer:.2f}", f"{rates.paper_cer:.2f}", f"{rates.cer:.2f}"


def _subset(config: RunConfig, subset: str | None) -> str:
    known = config.workload.data.dev + config.workload.data.test
    if subset is not None and subset not in known:
        raise InputError(f"--subset {subset!r}: the run's workload has {', '.join(known)}")
    return subset or config.workload.scored_subset


def _widths(text: str) -> list[int]:
    try:
        widths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        widths = []
    if not widths or min(widths) < 1 or max(widths) > MAX_BEAM_WIDTH:
        raise InputError(f"--beams {text!r}: expected widths from 1 to {MAX_BEAM_WIDTH} separated by commas, "
                         "e.g. 64,128,256")
    return widths
