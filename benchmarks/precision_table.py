"""One table per backend from finished runs: step time, time to each target and the final
dev-clean WER, per precision, as medians over the seeds.

Reads every run folder under the paths given (run folders or sweep folders), groups them by
(backend, precision) and prints Markdown:

    python benchmarks/precision_table.py runs/sweep-seeds runs/sweep-precision --seeds 0,1,2 --at-epochs 1,4

- step time: the median over every training batch of the run of `step_s` in metrics.jsonl,
  then the median of those over the seeds; "/ fp32" divides by the fp32 row's;
- a target's time: the median over the seeds of the minutes to it, where a run that stopped
  before reaching it counts as slower than any that did (so with 3 seeds the median is a
  number only when at least 2 reached it); the count that reached it is shown;
- CER at epoch E: the median over the seeds of the paper's CER on dev-clean after E epochs
  (`--at-epochs`; default: the fewest epochs any of the runs evaluated), which compares what
  the precisions learn per epoch, apart from how fast this machine computes in each;
- final WER: the untimed final evaluation on dev-clean in the run's own precision and, for a
  run not in fp32, the same weights evaluated in fp32 (the cost of the precision).

The folders are read as `benchbase report` reads them (benchbase.report.runs.load_groups); a
run folder without a result.json (killed, or still running) is named on stderr and left out.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from benchbase.errors import InputError
from benchbase.report.runs import load_groups
from benchbase.specs.result import RunResult

SUBSET = "dev-clean"
PRECISION_ORDER = ("fp32", "tf32", "bf16", "fp16", "int8-emulated")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run folders or folders of runs (a sweep)")
    parser.add_argument("--seeds", help="comma-separated: only the runs of these seeds (default: all)")
    parser.add_argument("--at-epochs", help="comma-separated epochs, one CER column each (default: the fewest "
                                            "epochs any run evaluated)")
    arguments = parser.parse_args()
    seeds = {int(seed) for seed in arguments.seeds.split(",")} if arguments.seeds else None
    try:
        loaded = load_groups(arguments.paths)  # a sweep folder is read configuration by configuration
    except InputError as error:
        raise SystemExit(f"precision_table.py: {error}") from None
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for group in loaded:
        for folder in group.left_out:
            print(f"precision_table.py: {folder}: left out (no result.json)", file=sys.stderr)
        for run in group.runs:
            if seeds is not None and run.result.seed not in seeds:
                continue
            precision = run.config.get("workload", {}).get("model", {}).get("precision", "?")
            cer = {record["epoch"]: record["subsets"][SUBSET]["paper_cer"] for record in run.evaluations
                   if SUBSET in record.get("subsets", {})}
            step = statistics.median(batch["step_s"] for batch in run.batches)
            groups[(run.result.backend or "?", precision)].append(Row(run.result, step, cer))
    if not groups:
        raise SystemExit("precision_table.py: no finished run of those seeds under "
                         + ", ".join(map(str, arguments.paths)))
    at_epochs = ([int(epoch) for epoch in arguments.at_epochs.split(",")] if arguments.at_epochs
                 else [min(max(row.cer, default=0) for rows in groups.values() for row in rows)])
    for backend in sorted({backend for backend, _ in groups}):
        rows = {precision: runs for (name, precision), runs in groups.items() if name == backend}
        print(_table(backend, dict(sorted(rows.items(), key=lambda item: _precision_rank(item[0]))), at_epochs))


@dataclass(frozen=True)
class Row:
    """One run as the table uses it."""

    result: RunResult
    median_step_s: float
    cer: dict[int, float]
    """Epoch -> the paper's CER on dev-clean at that epoch's evaluation."""


def _precision_rank(precision: str) -> int:
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)


def _table(backend: str, rows: dict[str, list[Row]], at_epochs: list[int]) -> str:
    targets = list(dict.fromkeys(target for runs in rows.values() for run in runs for target in run.result.tta))
    fp32_step = statistics.median(run.median_step_s for run in rows["fp32"]) if "fp32" in rows else None
    header = (["precision", "seeds", "median step ms", "/ fp32"] + [f"{target} (min)" for target in targets]
              + [f"CER at epoch {epoch}" for epoch in at_epochs]
              + [f"final {SUBSET} WER", "same weights in fp32", "status"])
    lines = [f"**{backend}**", "", "| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(header) - 2)]
    for precision, runs in rows.items():
        step = statistics.median(run.median_step_s for run in runs)
        cells = [precision, str(len(runs)), f"{step * 1e3:.0f}",
                 f"{step / fp32_step:.2f}" if fp32_step else ""]
        for target in targets:
            cells.append(_median_minutes([run.result.tta.get(target) for run in runs]))
        for epoch in at_epochs:
            cers = [run.cer[epoch] for run in runs if epoch in run.cer]
            cells.append(f"{statistics.median(cers):.1f}" + (f" ({len(cers)}/{len(runs)})" if len(cers) < len(runs)
                                                               else "") if cers else "none")
        finals = [run.result.final_evaluation for run in runs]
        cells.append(_median_wer(finals, twin=False))
        cells.append(_median_wer(finals, twin=True) if precision != "fp32" else "")
        statuses = [run.result.status for run in runs]
        cells.append(", ".join(f"{statuses.count(status)} {status}" for status in sorted(set(statuses))))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _median_minutes(reached: list) -> str:
    minutes = [entry["minutes"] if entry else math.inf for entry in reached]
    median = statistics.median(minutes)
    count = sum(entry is not None for entry in reached)
    shown = "not reached" if math.isinf(median) else f"{median:.2f}"
    return f"{shown} ({count}/{len(reached)})"


def _median_wer(finals: list, twin: bool) -> str:
    rates = []
    for final in finals:
        record = (final or {}).get("fp32", {}) if twin else (final or {})
        subset = record.get("subsets", {}).get(SUBSET)
        if subset is not None:
            rates.append(subset["wer"])
    if not rates:
        return "none"
    return f"{statistics.median(rates):.1f}" + (f" ({len(rates)}/{len(finals)})" if len(rates) < len(finals) else "")


if __name__ == "__main__":
    main()
