"""Checks that cross-examine a log against the other evidence in its run folder, instead of
trusting the numbers it states.

- decoded_outputs: every evaluation's logged rates equal the rates recomputed (jiwer) from the
  decoded outputs the log names; the files exist.
- eval_counts: every evaluation decoded the whole subset: as many utterances as the log's
  EVAL_SUBSETS and eval_samples say, and as the store the run names holds, when present.
- timeline: the log's evaluations happen when metrics.jsonl (the harness's per-batch clock)
  says they did, and no batch is trained after run_stop.
- artifacts: the checkpoints the log names exist, every rank's (older periodic ones are pruned by design).

Each raises Skip without a run folder (a bare log has nothing to cross-examine).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchbase.compliance import keys
from benchbase.compliance import rules as r
from benchbase.compliance.check_registry import check
from benchbase.compliance.evidence import Evidence, Skip
from benchbase.compliance.keys import constants
from benchbase.compliance.parse import LogEvent
from benchbase.run_folder import PERIODIC_CHECKPOINTS_KEPT, RunFolder, read_json_lines
from benchbase.specs.numbers import is_number

__all__ = ["artifacts", "decoded_outputs", "eval_counts", "timeline"]

RATES = ("wer", "cer", "paper_cer")
MESSAGES = 8


@check(r.DecodedOutputsRule)
def decoded_outputs(rule: r.DecodedOutputsRule, evidence: Evidence) -> list[str]:
    folder = _folder(evidence)
    messages: list[str] = []
    for event in _accuracy_events(evidence):
        name = _decoded_name(event, folder)
        if name is None:
            messages.append(f"line {event.line}: {event.key} names no decoded outputs")
            continue
        pairs, problem = _read_decoded(folder, name)
        if problem:
            messages.append(f"line {event.line}: {problem}")
            continue
        recomputed = _rates(pairs)
        for metric in RATES:
            logged = event.value.get(metric) if isinstance(event.value, dict) else None
            if not is_number(logged) or abs(logged - recomputed[metric]) > rule.tolerance:
                messages.append(f"line {event.line}: {event.key} of {_where(event)} says {metric} {logged!r}, its "
                                f"decoded outputs ({name}) give {recomputed[metric]:.4f} (tampered rates)")
    return messages[:MESSAGES]


@check(r.EvalCountsRule)
def eval_counts(rule: r.EvalCountsRule, evidence: Evidence) -> list[str]:
    folder = _folder(evidence)
    logged_sizes = evidence.value_of(keys.EVAL_SUBSETS)
    logged_sizes = logged_sizes if isinstance(logged_sizes, dict) else {}
    store_sizes = _store_sizes(evidence)
    messages: list[str] = []
    for event in _accuracy_events(evidence):
        subset = event.metadata.get(keys.SUBSET)
        name = _decoded_name(event, folder)
        pairs, problem = _read_decoded(folder, name) if name else ([], "no decoded outputs named")
        if problem:
            continue  # decoded_outputs reports it
        counts = {"decoded outputs": len(pairs), "metadata": event.metadata.get(keys.UTTERANCES)}
        if event.key == constants.EVAL_ACCURACY:
            counts[keys.EVAL_SUBSETS] = logged_sizes.get(subset)
        if subset in store_sizes:
            counts["the store"] = store_sizes[subset]
        known = {source: count for source, count in counts.items() if isinstance(count, int)}
        if len(set(known.values())) > 1:
            messages.append(f"line {event.line}: the evaluation of {_where(event)} counts "
                            + ", ".join(f"{count} utterances in {source}" for source, count in known.items())
                            + " (a partial evaluation)")
    scored = evidence.value_of(keys.TTA_SUBSET)
    samples = evidence.value_of(constants.EVAL_SAMPLES)
    if isinstance(scored, str) and is_number(samples) and scored in logged_sizes and samples != logged_sizes[scored]:
        messages.append(f"{constants.EVAL_SAMPLES} is {samples}, but {keys.EVAL_SUBSETS} gives {scored} "
                        f"{logged_sizes[scored]}")
    return messages[:MESSAGES]


@check(r.TimelineRule)
def timeline(rule: r.TimelineRule, evidence: Evidence) -> list[str]:
    folder = _folder(evidence)
    run_start = evidence.log.first(constants.RUN_START)
    if run_start is None:
        raise Skip(f"no {constants.RUN_START}")
    records = read_json_lines(folder.metrics)
    evaluations = [record for record in records if record.get("kind") == "eval"]
    stops = {event.epoch(): event for event in evidence.log.keyed(constants.EVAL_STOP)}
    messages: list[str] = []
    if len(evaluations) != len(stops):
        messages.append(f"metrics.jsonl records {len(evaluations)} evaluations, the log {len(stops)}")
    for record in evaluations:
        stop = stops.get(record.get("epoch"))
        if stop is None or not is_number(record.get("t")):
            messages.append(f"metrics.jsonl has an evaluation of epoch {record.get('epoch')!r} the log does not")
            continue
        logged = evidence.log.run_clock(stop.time_ms)
        allowed = rule.allowed(logged)
        if abs(record["t"] - logged) > allowed:
            messages.append(f"epoch {record['epoch']}: the log ends its evaluation at {logged:.3f} s, metrics.jsonl "
                            f"at {record['t']:.3f} s (tolerance {allowed:.3f} s; an edited timeline)")
    run_stop = evidence.log.first(constants.RUN_STOP)
    batches = [record["t"] for record in records if record.get("kind") == "batch" and is_number(record.get("t"))]
    if run_stop is not None and batches:
        stopped = evidence.log.run_clock(run_stop.time_ms)
        if max(batches) > stopped + rule.allowed(stopped):
            messages.append(f"metrics.jsonl has a batch at {max(batches):.3f} s, after {constants.RUN_STOP} at "
                            f"{stopped:.3f} s")
    return messages[:MESSAGES]


@check(r.ArtifactsRule)
def artifacts(rule: r.ArtifactsRule, evidence: Evidence) -> list[str]:
    folder = _folder(evidence)
    named = evidence.log.keyed(keys.CHECKPOINT)
    periodic = [event for event in named if not event.metadata.get(keys.FINAL)]
    must_exist = periodic[-PERIODIC_CHECKPOINTS_KEPT:] + [event for event in named if event.metadata.get(keys.FINAL)]
    messages = []
    for event in must_exist:
        ranks = event.metadata.get(keys.RANK_CHECKPOINTS)  # a run of several processes: each rank's own
        for named_path in [event.value, *(ranks if isinstance(ranks, list) else [])]:
            path = _inside(folder, named_path)
            if path is None or not path.is_file():
                messages.append(f"line {event.line}: checkpoint {named_path!r} named by the log does not exist")
    return messages[:MESSAGES]


# --- evidence from the folder ------------------------------------------------------------------


def _folder(evidence: Evidence) -> RunFolder:
    if evidence.folder is None:
        raise Skip("a bare log: no run folder to cross-examine")
    return evidence.folder


def _accuracy_events(evidence: Evidence) -> list[LogEvent]:
    return [event for event in evidence.log.events
            if event.key in (constants.EVAL_ACCURACY, keys.FINAL_ACCURACY) and isinstance(event.value, dict)]


def _decoded_name(event: LogEvent, folder: RunFolder) -> str | None:
    named = event.metadata.get(keys.DECODED)
    if isinstance(named, str):
        return named
    # Logs that do not name them use the harness's file names.
    subset = event.metadata.get(keys.SUBSET)
    if not isinstance(subset, str):
        return None
    if event.key == keys.FINAL_ACCURACY:
        path = folder.decoded_final(subset)
    else:
        epoch = event.epoch()
        if epoch is None:
            return None
        path = folder.decoded_evaluation(subset, epoch)
    try:
        return folder.relative(path)
    except ValueError:  # a subset named like an absolute path leaves the folder
        return None


def _read_decoded(folder: RunFolder, name: str | None) -> tuple[list[tuple[str, str]], str | None]:
    path = _inside(folder, name)
    if path is None:
        return [], f"decoded outputs {name!r} lie outside the run folder"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        return [], f"decoded outputs {name} cannot be read ({type(error).__name__})"
    pairs = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            pairs.append((str(record["reference"]), str(record["hypothesis"])))
        except (ValueError, KeyError, TypeError):
            return [], f"{name} line {number} is not a decoded output"
    if not pairs or not all(reference.strip() for reference, _ in pairs):
        return [], f"{name} holds no decoded outputs with references"
    return pairs, None


def _rates(pairs: list[tuple[str, str]]) -> dict[str, float]:
    from benchbase.metrics import error_rates

    rates = error_rates([reference for reference, _ in pairs], [hypothesis for _, hypothesis in pairs])
    return {"wer": rates.wer, "cer": rates.cer, "paper_cer": rates.paper_cer}


def _store_sizes(evidence: Evidence) -> dict[str, int]:
    """Utterances per subset in the store config.json names, when it is on this machine."""
    store = (evidence.config or {}).get("data")
    if not isinstance(store, str):
        return {}
    try:
        description = json.loads((Path(store) / "store.json").read_text(encoding="utf-8"))
        return {name: int(split["utterances"]) for name, split in description["splits"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _inside(folder: RunFolder, name: Any) -> Path | None:
    """The folder's file ``name`` if it stays inside the folder (a log must not point the checker elsewhere)."""
    if not isinstance(name, str) or not name:
        return None
    try:
        path = (folder.root / name).resolve()
        path.relative_to(folder.root.resolve())
    except (ValueError, OSError):
        return None
    return path


def _where(event: LogEvent) -> str:
    subset = event.metadata.get(keys.SUBSET, "?")
    return f"{subset} (final)" if event.key == keys.FINAL_ACCURACY else f"{subset} at epoch {event.epoch()}"
