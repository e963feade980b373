"""`benchbase verify RUN_DIR`: load the run's final weights into its backend, evaluate the scored
dev subset again and compare with what the log says those weights scored.

The log's numbers are the run's claim; this re-measures them from the checkpoint, with the
harness's own pipeline, decoder and metrics, so a log whose accuracies were edited together
with result.json (which `benchbase check` cannot tell from the log alone when the decoded
outputs were edited too) fails here.
"""

from __future__ import annotations

from pathlib import Path

import click

from benchbase.cli.app import cli
from benchbase.cli.framework_logs import load_backend
from benchbase.compliance import keys
from benchbase.compliance.parse import parse_log, read_log
from benchbase.data.store import FeatureStore
from benchbase.decode import evaluation_decoder
from benchbase.errors import InputError
from benchbase.harness.evaluation import evaluate_subsets
from benchbase.harness.replay import load_run_config, replay_pipeline, restored_backend
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder
from benchbase.specs import EvalSpec

__all__ = ["TOLERANCE", "verify"]

TOLERANCE = 0.1
"""Percentage points. predict() on a CPU repeats bit for bit; GPU kernels whose reductions run
in a different order may move a rate by a few hundredths."""
METRICS = ("wer", "paper_cer", "cer")


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--data", type=click.Path(path_type=Path), help="Feature store (default: the one in config.json).")
def verify(run_dir: Path, data: Path | None) -> None:
    """Re-evaluate RUN_DIR's final checkpoint on the scored dev subset; exit 0 when it matches the log, 1 if not."""
    config = load_run_config(run_dir)
    checkpoint = RunFolder(run_dir).final_checkpoint
    if not checkpoint.is_file():
        raise InputError(f"{checkpoint}: no final checkpoint (the run ended with an error, or predates them)")
    subset = config.workload.scored_subset
    claimed, decoder_name, beam_width, source = _claim(run_dir, subset, config.workload.evaluation)
    store_root = data or config.data
    store = FeatureStore(store_root)
    evaluation = config.workload.evaluation.model_copy(update={"decoder": decoder_name})
    decoder = evaluation_decoder(evaluation, store_root, config.workload.data.train,
                                 blank=config.workload.model.ctc_blank_index, beam_width=beam_width)
    pipeline = replay_pipeline(config, store, subset)
    load_backend(collect_registry(get_plugin_manager()), config.backend)  # its framework, imported quietly now
    with restored_backend(config, store, checkpoint) as backend:
        measured = evaluate_subsets(backend, {subset: pipeline}, decoder, config.workload.model)[subset].rates()
    differences = {metric: abs(measured[metric] - claimed[metric]) for metric in METRICS}
    for metric in METRICS:
        click.echo(f"{subset} {metric}: logged {claimed[metric]:.4f}, re-measured {measured[metric]:.4f}")
    if max(differences.values()) > TOLERANCE:
        click.echo(f"{run_dir}: the final weights do not score what {source} says (tolerance {TOLERANCE} points)")
        raise click.exceptions.Exit(1)
    click.echo(f"{run_dir}: verified against {source} ({decoder_name}, beam {beam_width}; tolerance {TOLERANCE} "
               "points)")


def _claim(run_dir: Path, subset: str, evaluation: EvalSpec) -> tuple[dict, str, int, str]:
    """What the log says the final weights scored on ``subset``: rates, decoder, beam, and which event says so."""
    path = RunFolder(run_dir).compliance_log
    log = read_log(path) if path.is_file() else parse_log(b"")
    final = [event for event in log.keyed(keys.FINAL_ACCURACY) if event.metadata.get(keys.SUBSET) == subset]
    if final and _rates_in(final[-1].value):
        event = final[-1]
        return (event.value, str(event.metadata.get(keys.EVAL_DECODER)), int(event.metadata.get(keys.EVAL_BEAM_WIDTH)),
                f"the final evaluation ({path.name} line {event.line})")
    # Without a final evaluation, the last periodic one describes the final weights only when
    # training ended right after it.
    stop = log.first("run_stop")
    ended_at_evaluation = stop is not None and stop.metadata.get(keys.STOP_REASON) in ("targets_reached", "max_epochs")
    periodic = [event for event in log.keyed("eval_accuracy") if event.metadata.get(keys.SUBSET) == subset]
    if not (ended_at_evaluation and periodic and _rates_in(periodic[-1].value)):
        raise InputError(f"{run_dir}: the log holds no evaluation of the final weights on {subset} to verify against")
    event = periodic[-1]
    return (event.value, evaluation.decoder, evaluation.beam_width,
            f"the last evaluation ({path.name} line {event.line})")


def _rates_in(value) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(metric), int | float) for metric in METRICS)
