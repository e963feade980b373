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

Only runs whose result.json passes its schema are read; a folder without one is named on
stderr and left out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from benchbase.run_folder import RunFolder, find_run_folders, read_json_lines
from benchbase.specs.result import RunResult, read_run_result
from benchbase.sweep_folder import configuration_folders

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
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for path in arguments.paths:
        for root in _run_folders(path):
            folder = RunFolder(root)
            try:
                result = read_run_result(folder.result.read_text())
                precision = json.loads(folder.config.read_text())["workload"]["model"]["precision"]
            except (OSError, ValueError, KeyError) as error:
                print(f"precision_table.py: {root}: left out ({error})", file=sys.stderr)
                continue
            if seeds is not None and result.seed not in seeds:
                continue
            metrics = read_json_lines(folder.metrics)
            steps = [line["step_s"] for line in metrics if line.get("kind") == "batch"]
            cer = {line["epoch"]: line["subsets"][SUBSET]["paper_cer"] for line in metrics
                   if line.get("kind") == "eval" and SUBSET in line.get("subsets", {})}
            groups[(result.backend or "?", precision)].append(Run(result, statistics.median(steps), cer))
    if not groups:
        raise SystemExit("precision_table.py: no finished run under " + ", ".join(map(str, arguments.paths)))
    at_epochs = ([int(epoch) for epoch in arguments.at_epochs.split(",")] if arguments.at_epochs
                 else [min(max(run.cer, default=0) for runs in groups.values() for run in runs)])
    for backend in sorted({backend for backend, _ in groups}):
        rows = {precision: runs for (name, precision), runs in groups.items() if name == backend}
        print(_table(backend, dict(sorted(rows.items(), key=lambda item: _precision_rank(item[0]))), at_epochs))


@dataclass(frozen=True)
class Run:
    result: RunResult
    median_step_s: float
    cer: dict[int, float]
    """Epoch -> the paper's CER on dev-clean at that epoch's evaluation."""


def _run_folders(path: Path) -> list[Path]:
    configurations = configuration_folders(path)
    if configurations is None:
        return find_run_folders(path)
    return [root for configuration in configurations for root in find_run_folders(configuration)]


def _precision_rank(precision: str) -> int:
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)


def _table(backend: str, rows: dict[str, list[Run]], at_epochs: list[int]) -> str:
    targets = list(dict.fromkeys(target for runs in rows.values() for run in runs for target in run.result.tta))
    fp32_step = statistics.median(run.median_step_s for run in rows["fp32"]) if "fp32" in rows else None
    header = (["precision", "seeds", "median step ms", "/ fp32"] + [f"{target} (min)" for target in targets]
              + [f"CER at epoch {epoch}" for epoch in at_epochs] + [f"final {SUBSET} WER", "same weights in fp32", "status"])
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
