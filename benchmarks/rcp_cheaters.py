"""Runs of the cheating backends (tests/cheating_backends.py) for `benchbase rcp check` to judge.

double_step (two optimizer updates per batch) and dev_data (also trains on dev-clean, the
subset it is scored on) predict honestly from the weights they trained, so independent
scoring passes them; what must catch them is the reference convergence points: their sets of
runs converge in fewer epochs than ds2-mini's reference runs (PyTorch, global batch 32) allow.
The oracle is here for completeness: independent scoring stops each of its runs at the first
evaluation (prediction_mismatch), so they have no result.json and `rcp check` leaves them out.

Every run goes through the real harness in this process, one after another (never two at
once: they would share the cores), on the registered ds2-mini workload (closed division) and
the `cpu` profile, into the layout a sweep writes, without the final evaluation (as the
reference sweep, examples/sweep-rcp-ds2-mini.yaml):

    python benchmarks/rcp_cheaters.py --out runs/rcp-cheaters --backends double_step,dev_data
    benchbase rcp check runs/rcp-cheaters/double_step-cpu runs/rcp-cheaters/dev_data-cpu

    OUT/double_step-cpu/seed-0/ ... seed-4/     one run folder per seed, as `benchbase run --out` writes it

A finished run (result.json present) is skipped, so a second invocation continues the first;
a run folder left without result.json (an aborted oracle, a killed run) is left as it is.
`--max-epochs` and `--data` try the script out on a small store; ds2-mini's RCPs judge only
runs of the full corpus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.errors import BenchbaseError
from benchbase.harness import run_benchmark
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig, WorkloadSpec
from benchbase.specs.overrides import division_of, open_changes

# The cheaters are test fixtures, never installed as a plugin: they live in tests/, which pytest
# puts on the import path and a script has to put there itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cheating_backends import CHEATERS, register_cheaters

WORKLOAD = "ds2-mini"
PROFILE = "cpu"
CHEATER_NAMES = tuple(cheater.name for cheater in CHEATERS)


def main() -> None:
    arguments = _parser().parse_args()
    manager = get_plugin_manager(load_entrypoints=False)
    register_cheaters(manager)
    registry = collect_registry(manager)
    registered = registry.workload(WORKLOAD)
    workload = registered
    if arguments.max_epochs is not None:  # a closed run choice: the run stays in the closed division
        workload = registered.model_copy(update={"max_epochs": arguments.max_epochs})
    store = ensure_workload_data(workload, arguments.data, default_cache())
    for name in arguments.backends:
        for seed in arguments.seeds:
            out = arguments.out / f"{name}-{PROFILE}" / f"seed-{seed}"
            config = RunConfig(workload=workload, backend=name, hardware=registry.profile(PROFILE), seed=seed,
                               out=out, data=store, final_evaluation=False, **_division(registered, workload))
            print(f"{name} seed {seed}: {_run(config, manager, registry)}", flush=True)
    groups = " ".join(str(arguments.out / f"{name}-{PROFILE}") for name in arguments.backends if name != "oracle")
    if groups:
        print(f"\nnow: benchbase rcp check {groups}")


def _run(config: RunConfig, manager, registry) -> str:
    """One run, unless it finished before; what became of it, in a few words."""
    folder = RunFolder(config.out)
    if folder.result.is_file():
        return f"finished before, {config.out}"
    if config.out.exists() and any(config.out.iterdir()):
        return f"left as it is (no result.json: remove {config.out} to run it again)"
    try:
        result = run_benchmark(config, manager, registry.backend(config.backend))
    except BenchbaseError as error:  # the oracle's prediction_mismatch, a non-finite loss: the log says it
        return f"stopped, {type(error).__name__}: {error}"
    reached = {label: tta["epoch"] for label, tta in result.tta.items() if tta is not None}
    return f"{result.status} ({result.stop_reason}) after {result.epochs} epochs; targets reached at epochs {reached}"


def _division(registered: WorkloadSpec, workload: WorkloadSpec) -> dict[str, object]:
    """RunConfig's division fields, as `benchbase run` sets them: the RCP check takes closed runs only."""
    changes = open_changes(registered.model_dump(mode="json"), workload.model_dump(mode="json"))
    return {"division": division_of(changes), "open_changes": tuple(changes)}


def _seeds(text: str) -> list[int]:
    """"0-4" or "0,1,2,3,4" (or both: "0-2,7")."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def _backends(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CHEATER_NAMES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown cheater {', '.join(unknown)}; "
                                         f"choose from {', '.join(CHEATER_NAMES)}")
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--out", type=Path, required=True, help="Folder for OUT/NAME-cpu/seed-N (reused if present).")
    parser.add_argument("--backends", type=_backends, default=list(CHEATER_NAMES),
                        help=f"Comma-separated cheaters to run (default: {','.join(CHEATER_NAMES)}).")
    parser.add_argument("--seeds", type=_seeds, default=_seeds("0-4"),
                        help="Seeds, as 0-4 or 0,1,2 (default 0-4: ds2-mini's RCP sets have 5 runs).")
    parser.add_argument("--max-epochs", type=int, default=None,
                        help="Stop each run after this many epochs (default: the workload's).")
    parser.add_argument("--data", type=Path, default=None,
                        help="A prepared feature store instead of ds2-mini's synthetic corpus (to try the script).")
    return parser


if __name__ == "__main__":
    main()
