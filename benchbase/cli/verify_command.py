"""`benchbase verify RUN_DIR`: score the run's final weights on the scored dev subset again and
compare with what the log says those weights scored.

The log's numbers are the run's claim; this re-measures them with the harness's own pipeline,
decoder and metrics, so a log whose accuracies were edited together with result.json (which
`benchbase check` cannot tell from the log alone when the decoded outputs were edited too)
fails here. By default the weights the backend exported at the end of the run are re-scored by
benchbase's NumPy reference model, and no backend code runs at all ("independent"): a backend
whose predict() did not follow its weights cannot pass. ``--with-backend`` loads the final
checkpoint into the run's backend and asks its predict() instead, as verify did before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import click
import numpy as np

from benchbase.cli.app import cli
from benchbase.cli.framework_logs import load_backend
from benchbase.cli.resumable import resume_command
from benchbase.compliance import keys
from benchbase.compliance.parse import ParsedLog, parse_log, read_log
from benchbase.data.store import FeatureStore
from benchbase.decode import evaluation_decoder
from benchbase.errors import InputError, UnreadableFile
from benchbase.families.agreement import ReferencePredictor
from benchbase.families.parts import family_parts
from benchbase.harness.evaluation import SubsetEvaluation, evaluate_subsets
from benchbase.harness.replay import load_run_config, replay_pipeline, restored_backend
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder
from benchbase.specs import EvalSpec, ModelSpec

__all__ = ["TOLERANCE", "verify"]

TOLERANCE = 0.1
"""Percentage points. predict() on a CPU repeats bit for bit; GPU kernels whose reductions run
in a different order may move a rate by a few hundredths."""
METRICS = ("wer", "paper_cer", "cer")


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--data", type=click.Path(path_type=Path), help="Feature store (default: the one in config.json).")
@click.option("--independent/--with-backend", default=True, show_default=True,
              help="Re-score the exported final weights with benchbase's reference model, no backend code (the "
              "default), or load the final checkpoint into the run's backend and score its predict().")
def verify(run_dir: Path, data: Path | None, independent: bool) -> None:
    """Re-score RUN_DIR's final weights on the scored dev subset; exit 0 when it matches the log, 1 if not."""
    config = load_run_config(run_dir)
    with_backend = not independent
    folder = RunFolder(run_dir)
    source_of_weights = folder.final_checkpoint if with_backend else folder.final_weights
    if not source_of_weights.is_file():
        raise InputError(_no_final_weights(folder, source_of_weights, with_backend))
    subset, model = config.workload.scored_subset, config.workload.model
    claimed, decoder_name, beam_width, source = _claim(run_dir, subset, config.workload.evaluation)
    store_root = data or config.data
    store = FeatureStore(store_root)
    evaluation = config.workload.evaluation.model_copy(update={"decoder": decoder_name})
    decoder = evaluation_decoder(evaluation, store_root, config.workload.data.train,
                                 blank=config.workload.model.blank_index, beam_width=beam_width,
                                 tokens=config.workload.data.tokens)
    pipeline = replay_pipeline(config, store, subset)
    if with_backend:
        load_backend(collect_registry(get_plugin_manager()), config.backend)  # its framework, imported quietly now
        with restored_backend(config, store, source_of_weights) as backend:
            head = family_parts(model).evaluation_head(model, decoder, backend.export_weights)
            evaluated = evaluate_subsets(backend, {subset: pipeline}, head)[subset]
        tolerances = dict.fromkeys(METRICS, TOLERANCE)
        how = f"{config.backend}'s predict() on the final checkpoint"
    else:
        weights = _exported_weights(run_dir, config.workload.model, store.feature_dimension)
        predictor = ReferencePredictor(weights, model)
        head = family_parts(model).evaluation_head(model, decoder, lambda: weights)
        evaluated = evaluate_subsets(predictor, {subset: pipeline}, head)[subset]
        tolerances = _independent_tolerances(evaluated)
        how = "independent: re-scored by the reference model from the exported weights, no backend code"
    measured = evaluated.rates()
    click.echo(how)
    for metric in METRICS:
        click.echo(f"{subset} {metric}: logged {claimed[metric]:.4f}, re-measured {measured[metric]:.4f} "
                   f"(tolerance {tolerances[metric]:.3g})")
    if any(abs(measured[metric] - claimed[metric]) > tolerances[metric] for metric in METRICS):
        click.echo(f"{run_dir}: the final weights do not score what {source} says")
        raise click.exceptions.Exit(1)
    click.echo(f"{run_dir}: verified against {source} ({decoder_name}, beam {beam_width})")


def _no_final_weights(folder: RunFolder, source_of_weights: Path, with_backend: bool) -> str:
    """Why there are none: a run that did not finish (and how to continue it), or one from before them."""
    if command := resume_command(folder):
        return (f"{source_of_weights}: no final weights: the run did not finish; continue it with `{command}`, "
                "then verify it")
    hint = "" if with_backend else "; runs made before independent scoring exported none: try --with-backend"
    return f"{source_of_weights}: no final weights (the run ended with an error, or predates them{hint})"


def _exported_weights(run_dir: Path, model: ModelSpec, feature_dimension: int) -> dict[str, np.ndarray]:
    """The final weights the run exported, as the log names them (same sha256), in the model's layout."""
    folder = RunFolder(run_dir)
    path = folder.final_weights
    named = _log_of(folder.compliance_log).keyed(keys.EXPORTED_WEIGHTS)
    digest = named[-1].value.get("sha256") if named and isinstance(named[-1].value, dict) else None
    if digest is not None and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise InputError(f"{path}: not the exported weights the log names (sha256 differs)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            weights = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a readable .npz of weights ({str(error)[:200]})") from None
    problem = ReferencePredictor.layout_problem(weights, model, feature_dimension)
    if problem:
        raise InputError(f"{path}: {problem}")
    return weights


def _independent_tolerances(evaluated: SubsetEvaluation) -> dict[str, float]:
    """The reference and predict() agree to rounding, so a decoded symbol differs only at a near
    tie: TOLERANCE, or one word's or character's share of the subset, whichever is larger."""
    words = sum(len(reference.split()) for reference in evaluated.references) or 1
    characters = sum(len(reference) for reference in evaluated.references) or 1
    return {"wer": max(TOLERANCE, 100 / words), "cer": max(TOLERANCE, 100 / characters),
            "paper_cer": max(TOLERANCE, 100 / characters)}


def _claim(run_dir: Path, subset: str, evaluation: EvalSpec) -> tuple[dict, str, int, str]:
    """What the log says the final weights scored on ``subset``: rates, decoder, beam, and which event says so."""
    path = RunFolder(run_dir).compliance_log
    log = _log_of(path)
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


def _log_of(path: Path) -> ParsedLog:
    """The run's compliance log, or an empty one where there is none."""
    try:
        return read_log(path) if path.is_file() else parse_log(b"")
    except OSError as error:
        raise UnreadableFile(path, error) from None


def _rates_in(value) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(metric), int | float) for metric in METRICS)
