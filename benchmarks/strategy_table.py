"""The table of docs/BENCHMARKS.md's "Training strategies on ds2-mini" from a finished strategy sweep.

    python benchmarks/strategy_table.py runs/sweep-strategies

For each configuration (strategy x global batch; examples/sweep-strategies.yaml) and its seeds,
from each run's result.json and mllog.log: the epochs to each target (median over the seeds that
reached it, and how many did), the last dev-clean WER and CER (median), and the bytes one learner
communicated per epoch (the log's benchbase_communication events, summed over the epochs, divided
by the epochs). Nothing is timed: 4 learners on 2 cores measure epochs, not time.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _events(log: Path, key: str) -> list[dict]:
    found = []
    for line in log.read_text(encoding="utf-8").splitlines():
        event = json.loads(line.partition(" ")[2])
        if event["key"] == key:
            found.append(event)
    return found


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def configuration_row(folder: Path) -> tuple[list[str], list[str]] | None:
    runs = sorted(run for run in folder.glob("seed-*") if (run / "result.json").is_file())
    if not runs:
        return None
    results = [json.loads((run / "result.json").read_text()) for run in runs]
    targets = list(results[0]["tta"])
    cells = []
    for target in targets:
        epochs = [result["tta"][target]["epoch"] for result in results if result["tta"].get(target)]
        cells.append(f"{_median(epochs)} ({len(epochs)}/{len(results)})")
    wer = [result["last_evaluation"]["wer"] for result in results]
    cer = [result["last_evaluation"]["paper_cer"] for result in results]
    per_epoch = []
    for run in runs:
        communicated = _events(run / "mllog.log", "benchbase_communication")
        if communicated:
            total = sum(event["value"]["bytes_per_step"] * event["value"]["steps"] for event in communicated)
            per_epoch.append(total / len(communicated) / 1e6)
    return targets, [folder.name, str(len(results)), *cells, _median(wer), _median(cer),
                     f"{statistics.median(per_epoch):.1f}" if per_epoch else "-"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    arguments = parser.parse_args()
    rows, targets = [], None
    for folder in sorted(path for path in arguments.sweep.iterdir() if path.is_dir()):
        row = configuration_row(folder)
        if row is not None:
            targets, cells = row
            rows.append(cells)
    if targets is None:
        raise SystemExit(f"{arguments.sweep}: no finished run")
    header = ["configuration", "seeds", *[f"epochs to {target}" for target in targets], "last dev-clean WER",
              "last dev-clean CER", "MB sent per epoch per learner"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
