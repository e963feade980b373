"""What independent scoring costs: measured on ds2-mini run folders, estimated for ds2.

Independent scoring runs off the clock after each evaluation (and once more after the final
evaluation), so it never moves a time to accuracy; what it costs is wall time. For each run
folder given, this reads the log's independent scores (their own ``seconds``) beside each
evaluation's duration (metrics.jsonl's ``eval_s``) and the run clock at run_stop, and prints
the median share of an evaluation and the share of the whole run (run clock plus the
off-clock scoring).

For ds2 (the paper's model), which no CPU here trains, it estimates the same from the model's
multiply-adds per output frame and this machine's float64 NumPy speed on the two shapes the
reference spends its time in, measured here: a batched input projection (a GEMM) and one
recurrent step of a small batch (one (batch, 800) x (800, 3200) product per frame and layer).

    python benchmarks/independent_scoring_cost.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from benchbase.families.ds2.cost import forward_flops_per_frame
from benchbase.harness.independent_scoring import ROUNDING_DRAWS
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.telemetry.cpu_features import cpu_model

FORWARDS_PER_SCORE = 1 + ROUNDING_DRAWS * 2
"""The reference once as is, then the harness's rounding draws, each of whose dot products also
computes |x| @ |kernel| for its bound: about three plain forwards of work for one draw."""
LIBRISPEECH_DEV_CLEAN_SECONDS = 5.4 * 3600 / 2703
"""dev-clean's mean utterance length: 5.4 hours in 2,703 utterances (LibriSpeech's own counts)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    arguments = parser.parse_args()
    print(f"CPU: {cpu_model()}; {platform.python_version()}, numpy {np.__version__}")
    for run in arguments.runs:
        measured(run)
    estimated_for_ds2()


def measured(run: Path) -> None:
    events = [json.loads(line.split(" ", 1)[1]) for line in (run / "mllog.log").read_text().splitlines()]
    scores = {event["metadata"]["epoch_num"]: event["value"] for event in events
              if event["key"] == "benchbase_independent_score" and not event["metadata"].get("final")}
    final = [event["value"] for event in events
             if event["key"] == "benchbase_independent_score" and event["metadata"].get("final")]
    evaluations = {record["epoch"]: record["eval_s"] for record in map(json.loads, (run / "metrics.jsonl").open())
                   if record.get("kind") == "eval"}
    result = json.loads((run / "result.json").read_text())
    shares = [scores[epoch]["seconds"] / evaluations[epoch] for epoch in evaluations if epoch in scores]
    scoring = sum(score["seconds"] for score in scores.values())
    print(f"{run}: {len(scores)} evaluations, {scores[min(scores)]['utterances']} utterances each; "
          f"independent scoring {statistics.median(score['seconds'] for score in scores.values()):.2f} s median "
          f"= {statistics.median(shares):.0%} of an evaluation (median {statistics.median(evaluations.values()):.2f} s)"
          f"; {scoring:.1f} s in all = {scoring / (result['run_seconds'] + scoring):.1%} of the run "
          f"({result['run_seconds']:.0f} s on the clock)")
    if final:
        print(f"  final evaluation: {final[-1]['utterances']} utterances re-scored in {final[-1]['seconds']:.1f} s")


def estimated_for_ds2() -> None:
    workload = collect_registry(get_plugin_manager(load_entrypoints=False)).workload("ds2")
    model = workload.model
    flops = forward_flops_per_frame(model, workload.features.dimension)
    per_frame = (flops["conv"] + flops["lstm_matmul"] + flops["output"]) // 2  # the reference's work: its matmuls
    input_frames = LIBRISPEECH_DEV_CLEAN_SECONDS * 100  # 10 ms hop
    output_frames = model.output_frames(int(input_frames))
    flops = 2 * per_frame * output_frames * FORWARDS_PER_SCORE
    gemm = _flops_per_second((4 * output_frames, model.lstm_units), (model.lstm_units, 4 * model.lstm_units))
    recurrent = _flops_per_second((4, model.lstm_units), (model.lstm_units, 4 * model.lstm_units))
    # The input projections and the convolution run as GEMMs; the recurrent products one frame at a time.
    recurrent_macs = model.lstm_layers * model.lstm_units * 4 * model.lstm_units
    share = recurrent_macs / per_frame
    seconds = flops * (share / recurrent + (1 - share) / gemm)
    print(f"ds2: {per_frame / 1e6:.1f} M multiply-adds per output frame; a dev-clean utterance of "
          f"{LIBRISPEECH_DEV_CLEAN_SECONDS:.1f} s has {output_frames} output frames: "
          f"{2 * per_frame * output_frames / 1e9:.1f} GFLOP per forward, {flops / 1e9:.0f} GFLOP per re-scored "
          f"utterance ({FORWARDS_PER_SCORE} forwards' worth with the bound)")
    print(f"  float64 here: GEMM {gemm / 1e9:.1f} GFLOP/s, recurrent step (batch 4) {recurrent / 1e9:.1f} GFLOP/s "
          f"({share:.0%} of the work is recurrent): about {seconds:.0f} s per utterance on this CPU")


def _flops_per_second(left: tuple[int, int], right: tuple[int, int], repeats: int = 20) -> float:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(left), rng.standard_normal(right)
    a @ b  # warm-up
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        timings.append(time.perf_counter() - started)
    return 2 * left[0] * left[1] * right[1] / statistics.median(timings)


if __name__ == "__main__":
    main()
