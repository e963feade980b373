"""Length bucketing against the shuffle buffer: padding, training speed and time to accuracy.

For each mini workload, two runs through the harness that differ only in `data.length_buckets`
(0: a shuffle buffer over the shards; N: the split sorted by length into N buckets, batches cut
within a bucket, as MLPerf's RNN-T reference does with its 6), one at a time, the same seed:

    python benchmarks/length_bucketing.py --out runs/bucketing [--workloads ds2-mini,rnnt-mini]
        [--backend torch] [--buckets 6] [--seed 0]
    python benchmarks/length_bucketing.py --tabulate runs/bucketing   # the table again, no runs

and prints, per run, as Markdown:

- padding: the share of the training FLOPs spent on padded frames (result.json's
  `compute.padding_fraction`, the family's cost model on each batch's padded and valid frames);
- utt/s: training utterances over the summed `step_s` of metrics.jsonl (the steps alone: data
  waits, evaluations and checkpoints left out), and the median step in ms;
- the epoch and run-clock minutes at which each target was reached (`tta` of result.json), and
  the run's status. A bucketed epoch has a few batches fewer: each bucket drops its own remainder.

A run folder that exists already is not run again (delete it to rerun); a run that failed is
named on stderr and its row says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_WORKLOADS = ("ds2-mini", "rnnt-mini", "conformer-mini")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Folder for the run folders (WORKLOAD-bN).")
    parser.add_argument("--tabulate", type=Path, help="Only print the table of the run folders under this one.")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--buckets", type=int, default=6, help="length_buckets of the bucketed run.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.tabulate is None and args.out is None:
        parser.error("give --out (run, then tabulate) or --tabulate")
    folder = args.tabulate or args.out
    if args.tabulate is None:
        for workload in args.workloads.split(","):
            for buckets in (0, args.buckets):
                run(workload, args.backend, buckets, args.seed, folder / f"{workload}-b{buckets}")
    print(table(sorted(path.parent for path in folder.glob("*/result.json"))))


def run(workload: str, backend: str, buckets: int, seed: int, out: Path) -> None:
    if out.exists():
        return
    command = [sys.executable, "-m", "benchbase", "run", "--workload", workload, "--backend", backend,
               "--hw", "cpu", "--seed", str(seed), "--set", f"workload.data.length_buckets={buckets}",
               "--out", str(out)]
    finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if finished.returncode != 0:
        print(f"{out}: exit {finished.returncode}: {finished.stderr.strip()[-300:]}", file=sys.stderr)


def table(runs: list[Path]) -> str:
    lines = ["| workload | buckets | padding | utt/s | median step ms | epochs | targets: epoch (minutes) | status |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for folder in runs:
        result = json.loads((folder / "result.json").read_text())
        config = json.loads((folder / "config.json").read_text())
        steps = [record["step_s"] for record in _records(folder / "metrics.jsonl") if record.get("kind") == "batch"]
        reached = ", ".join(f"{name} {at['epoch']} ({at['minutes']:.2f})"
                            for name, at in (result.get("tta") or {}).items() if at)
        lines.append(
            f"| {result['workload']} | {_buckets(config)} | {result['compute']['padding_fraction']:.1%} "
            f"| {result['train_samples'] / sum(steps):.1f} | {1000 * statistics.median(steps):.1f} "
            f"| {result['epochs']} | {reached or 'none'} | {result['status']} |")
    return "\n".join(lines)


def _buckets(config: dict) -> int:
    return config["workload"]["data"]["length_buckets"]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    main()
