"""Learning curves of ds2-mini, to set its targets and to choose AdaDelta's learning rate.

Each run trains ds2-mini through the real harness for a fixed time with targets it cannot reach
(so it never stops early), one run after another (never two at once: they would share the
cores). The script then prints, for every run, the median of the last three dev-clean
evaluations over the run clock (the TTA rule's aggregate) beside dev-other, and when that
aggregate first falls to each candidate target.

    python benchmarks/ds2_mini_curves.py --out runs/curves --seeds 0,1,2 --learning-rates 1.0 --minutes 6
    python benchmarks/ds2_mini_curves.py --out runs/curves-lr --seeds 0 --learning-rates 0.001 --minutes 6

Each run folder is an ordinary run: `benchbase report` and `benchbase check` read it.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.harness import run_benchmark
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder, read_json_lines
from benchbase.specs import RunConfig, TTARule

CANDIDATES = {"paper_cer": (60, 50, 40, 30, 25, 20, 15, 12, 10), "wer": (90, 80, 70, 60, 50, 40, 30)}
UNREACHABLE = TTARule(subset="dev-clean", targets=({"metric": "paper_cer", "value": 0.01},), window=3)


def main() -> None:
    arguments = _parser().parse_args()
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    base = registry.workload("ds2-mini")
    store = ensure_workload_data(base, None, default_cache())
    for rate in arguments.learning_rates:
        for seed in arguments.seeds:
            workload = base.model_copy(update={
                "optimizer": base.optimizer.model_copy(update={"learning_rate": rate}),
                "tta": UNREACHABLE.model_copy(update={"window": base.tta.window}),
                "max_minutes": arguments.minutes, "max_epochs": 1000})
            out = arguments.out / f"lr{rate:g}-seed{seed}"
            if not RunFolder(out).result.exists():
                config = RunConfig(workload=workload, backend=arguments.backend, hardware=registry.profile("cpu"),
                                   seed=seed, out=out, data=store, final_evaluation=False)
                run_benchmark(config, manager, registry.backend(arguments.backend))
            _summarize(out, base.tta.window)


def _summarize(run: Path, window: int) -> None:
    evaluations = [record for record in read_json_lines(RunFolder(run).metrics) if record.get("kind") == "eval"]
    print(f"\n{run.name}: {len(evaluations)} evaluations")
    print("  epoch  minutes  dev-clean CER (median of last 3)  WER (median)  dev-other CER  WER  loss")
    reached: dict[str, float] = {}
    for index, record in enumerate(evaluations):
        last = evaluations[max(0, index + 1 - window): index + 1]
        medians = {metric: statistics.median(item[metric] for item in last) if len(last) == window else None
                   for metric in CANDIDATES}
        other = record["subsets"]["dev-other"]
        print(f"  {record['epoch']:5d}  {record['t'] / 60:7.2f}"
              f"  {record['paper_cer']:6.2f} ({_shown(medians['paper_cer'])})"
              f"  {record['wer']:6.2f} ({_shown(medians['wer'])})  {other['paper_cer']:6.2f}  {other['wer']:6.2f}"
              f"  {record['loss']:7.2f}")
        for metric, values in CANDIDATES.items():
            for value in values:
                label = f"{metric} {value}"
                if medians[metric] is not None and medians[metric] <= value and label not in reached:
                    reached[label] = record["t"] / 60
    print("  first reached (minutes): " + ", ".join(f"{label}: {minutes:.2f}" for label, minutes in reached.items()))


def _shown(value: float | None) -> str:
    return "  -  " if value is None else f"{value:5.2f}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Folder for the run folders (reused if present).")
    parser.add_argument("--seeds", type=lambda text: [int(part) for part in text.split(",")], default=[0])
    parser.add_argument("--learning-rates", type=lambda text: [float(part) for part in text.split(",")],
                        default=[1.0])
    parser.add_argument("--minutes", type=float, default=6.0, help="Run-clock limit of each run.")
    parser.add_argument("--backend", default="torch")
    return parser


if __name__ == "__main__":
    main()
