"""`benchbase check` on a long run's log: wall time and peak memory, two source trees side by side.

Writes a synthetic compliance log of about --size-mb MB shaped like the harness's (see
benchbase/harness/runner.py): cache_clear, init_start, the submission and hyperparameter events
with the values the registered workload pins, init_stop, run_start, then --epochs epochs of
epoch_start, one `tracked_stats` event per batch (MLPerf's per-step statistics: the extra
POINT_IN_TIME events that make a long run's log big), a benchbase_checkpoint every
checkpoint_every batches, epoch_stop, eval_start, one eval_accuracy per dev subset (epoch_num,
subset, decoded, utterances metadata), eval_stop; then the run's footprint events, run_stop, the
final checkpoint and the final evaluation of every dev and test subset. Every event carries the
file/lineno metadata mllog writes. As a bare log (no result.json beside it) it passes every rule
that applies to one.

Then checks it in fresh child processes, each tree in turn, --repeats times, with PYTHONPATH
pointing at the tree, so the code before a change and after it run side by side:

    git worktree add --detach /tmp/check-before <the commit before the change>
    python benchmarks/check_scaling.py --tree before=/tmp/check-before --tree after=. --repeats 3

Two measurements per tree and repeat:
- api: check_log(log) with the registered workloads, in a child process that has imported
  benchbase and loaded the registry first: the check's wall time, the process's peak RSS
  (ru_maxrss) and the RSS before the check (VmRSS), whose difference is the check's own peak;
- cli: `benchbase check LOG` end to end (interpreter start, plugins, registry, check, table):
  wall time and peak RSS from wait4.
Medians are reported, and the ratio of the medians (before / after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MB = 1_000_000
START_MS = 1_795_384_454_794
RUNNER = "benchbase/harness/runner.py"
CHILD = r"""
import json, resource, sys, time
from pathlib import Path

import benchbase
from benchbase.compliance.checker import check_log
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

def rss_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

workloads = collect_registry(get_plugin_manager(load_entrypoints=False)).workloads
before = rss_kib("VmRSS")
start = time.perf_counter()
report = check_log(Path(sys.argv[1]), workloads=workloads)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "before_kib": before, "passed": report.passed, "failures": report.failures[:5],
                  "benchbase": benchbase.__file__}))
"""
CLI = "import sys; from benchbase.cli import main; sys.exit(main())"
OFFICIAL = r"""
import sys, tempfile
from pathlib import Path

sys.path.insert(0, sys.argv[2])  # tests/, where the helper that runs the official checker lives
from official_checker import check_common_rules

with tempfile.TemporaryDirectory() as work:
    passed, _ = check_common_rules(Path(sys.argv[1]), Path(work))
print(passed)
"""
OFFICIAL_NAME = "mlperf-logging"
"""The row of the official checker (mode "official"), which no source tree changes."""


# --- the log -----------------------------------------------------------------------------------


def _line(time_ms: int, event_type: str, key: str, value: Any, lineno: int, **metadata: Any) -> str:
    record = {"namespace": "", "time_ms": time_ms, "event_type": event_type, "key": key, "value": value,
              "metadata": {"file": RUNNER, "lineno": lineno, **metadata}}
    return f":::MLLOG {json.dumps(record)}\n"


def write_log(path: Path, workload_name: str, size_mb: float, epochs: int) -> dict[str, Any]:
    """A passing bare log of about size_mb MB; returns its shape."""
    from benchbase.compliance.keys import OPTIMIZER_KEYS
    from benchbase.compliance.precision_keys import lowest_numerical_precisions
    from benchbase.compliance.rules import load_ruleset
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry
    from benchbase.run_folder import RunFolder
    from benchbase.specs.overrides import field_at
    from benchbase.telemetry.cpu_features import cpu_record
    from benchbase.telemetry.environment import software_environment

    folder = RunFolder(path.parent)  # the run folder the log would sit in: what its events name
    workload = collect_registry(get_plugin_manager(load_entrypoints=False)).workload(workload_name)
    spec = workload.model_dump(mode="json")
    pinned = next(rule for rule in load_ruleset().rules if rule.check == "fixed_hyperparameters")
    dev, test = list(workload.data.dev), list(workload.data.test)
    utterances = {subset: 2700 + 11 * index for index, subset in enumerate(dev + test)}
    every, checkpoint_every = workload.evaluation.every_epochs, workload.evaluation.checkpoint_every
    batch_line = len(_line(START_MS, "POINT_IN_TIME", "tracked_stats", {"throughput": 153.21, "loss": 187.3412},
                           244, epoch_num=epochs, step=123_456))
    checkpoint_line = len(_line(START_MS, "POINT_IN_TIME", "benchbase_checkpoint",
                                folder.relative(folder.periodic_checkpoint(0)), 277, epoch_num=epochs,
                                batch=epochs * 10_000))
    batches_per_epoch = max(1, round(size_mb * MB / epochs / (batch_line + checkpoint_line / checkpoint_every)))
    clock = START_MS
    with path.open("w", encoding="utf-8") as out:
        def emit(event_type: str, key: str, value: Any = None, lineno: int = 166, step_ms: int = 0,
                 **metadata: Any) -> None:
            nonlocal clock
            clock += step_ms
            out.write(_line(clock, event_type, key, value, lineno, **metadata))

        emit("POINT_IN_TIME", "cache_clear", True, 110)
        emit("INTERVAL_START", "init_start", None, 111, 1)
        header = {"submission_org": "benchbase", "submission_platform": "cpu", "submission_division": "open",
                  "submission_status": "research", "submission_benchmark": workload_name,
                  "submission_entry": "benchbase 0.1.0 backend=torch", "benchbase_backend_contract": 2, "seed": 0,
                  "global_batch_size": 32, "gradient_accumulation_steps": 1,
                  "train_samples": 32 * batches_per_epoch, "eval_samples": utterances[workload.scored_subset],
                  "benchbase_eval_subsets": {subset: utterances[subset] for subset in dev},
                  "benchbase_tta_subset": workload.scored_subset}
        # The workload's optimizer's own keys, as the harness logs them (none of another optimizer).
        foreign = {key for name, found in OPTIMIZER_KEYS.items() if name != workload.optimizer.name for key in found}
        header.update({key: field_at(spec, path) for key, path in pinned.log_keys.items()
                       if key not in foreign})
        header["benchbase_world_size"] = 1
        header["benchbase_device_plan"] = {"kind": "cpu", "count": 1, "batch_per_device": 32, "world_size": 1,
                                           "profile_kind": "cpu", "profile_count": 1, "overridden": False}
        header["benchbase_overrides"] = []
        header["benchbase_open_changes"] = []
        # MLPerf Training 6.0's lowest numerical precisions (rule set 1.9), as the harness logs them.
        header.update(lowest_numerical_precisions(workload.model.precision, "sync"))
        # The environment a real run records (rule set 1.4), this machine's, as the harness writes it.
        header["benchbase_environment"] = {**software_environment("torch", "benchbase_torch_ds2.backend"),
                                           "cpu": cpu_record()}
        for key, value in header.items():
            emit("POINT_IN_TIME", key, value, 166, 1)
        emit("INTERVAL_END", "init_stop", None, 84, 1)
        emit("INTERVAL_START", "run_start", None, 86, 1)
        step = 0
        for epoch in range(1, epochs + 1):
            emit("INTERVAL_START", "epoch_start", None, 186, 5, epoch_num=epoch)
            for _ in range(batches_per_epoch):
                step += 1
                if step == 1:  # rule set 1.9: the first step, replayed with the workload's optimizer
                    emit("POINT_IN_TIME", "benchbase_optimizer_replay",
                         {"optimizer": workload.optimizer.name, "probe": "sgd", "worst_ratio": 0.2014, "seconds": 3.9,
                          "agree": True}, 197, 240, epoch_num=epoch)
                emit("POINT_IN_TIME", "tracked_stats", {"throughput": round(150 + (step * 7919) % 1000 / 100, 4),
                                                        "loss": round(200 * 0.9999 ** step + step % 13 / 10, 4)},
                     244, 240, epoch_num=epoch, step=step)
                if step % checkpoint_every == 0:
                    emit("POINT_IN_TIME", "benchbase_checkpoint", folder.relative(folder.periodic_checkpoint(step)),
                         277, 30, epoch_num=epoch, batch=step)
            emit("INTERVAL_END", "epoch_stop", None, 193, 1, epoch_num=epoch)
            if epoch % every:
                continue
            emit("INTERVAL_START", "eval_start", None, 258, 1, epoch_num=epoch)
            for index, subset in enumerate(dev):
                rate = 100 * 0.93 ** epoch + 10 * index
                emit("POINT_IN_TIME", "eval_accuracy",
                     {"wer": round(min(100, 2 * rate), 4), "cer": round(rate, 4), "paper_cer": round(rate * 0.99, 4),
                      "loss": round(3 * rate, 4)}, 262, 1500, epoch_num=epoch, subset=subset,
                     decoded=folder.relative(folder.decoded_evaluation(subset, epoch)), utterances=utterances[subset])
            emit("INTERVAL_END", "eval_stop", None, 264, 1, epoch_num=epoch)
        emit("POINT_IN_TIME", "benchbase_devices", ["cpu (1 threads)"], 173, 1)
        emit("POINT_IN_TIME", "benchbase_cpu_cores_in_steps", 1.004, 174, 0, thread_budget=1)
        emit("INTERVAL_END", "run_stop", None, 58, 1, status="success", stop_reason="targets_reached")
        emit("POINT_IN_TIME", "benchbase_checkpoint", folder.relative(folder.final_checkpoint), 286, 40,
             epoch_num=epochs, batch=step, final=True)
        for subset in dev + test:
            emit("POINT_IN_TIME", "benchbase_final_accuracy", {"wer": 30.0, "cer": 9.0, "paper_cer": 8.9, "loss": 27.0},
                 348, 1500, subset=subset, eval_decoder="beam", eval_beam_width=8, utterances=utterances[subset])
    with path.open("rb") as handle:
        lines = sum(1 for _ in handle)
    return {"bytes": path.stat().st_size, "lines": lines, "epochs": epochs, "batches_per_epoch": batches_per_epoch,
            "workload": workload_name}


# --- measuring ---------------------------------------------------------------------------------


def _environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree.resolve()), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONHASHSEED", None)
    return env


def _run(command: list[str], tree: Path, timeout: float) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS (KiB), exit status and stdout of a child, from wait4. The child runs
    with -P (no script or working folder first on sys.path), so `benchbase` is the tree's."""
    with tempfile.TemporaryFile() as stdout:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=_environment(tree), stdout=stdout, stderr=subprocess.STDOUT,
                                   cwd=tempfile.gettempdir())
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:
            process.kill()
            raise
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        output = stdout.read().decode("utf-8", errors="replace")
    if seconds > timeout:
        print(f"warning: {' '.join(command[:3])} took {seconds:.0f} s", file=sys.stderr)
    return seconds, usage.ru_maxrss, process.returncode, output


def measure_api(tree: Path, log: Path) -> dict[str, Any]:
    _, _, code, output = _run([sys.executable, "-P", "-c", CHILD, str(log)], tree, 600)
    if code != 0:
        raise SystemExit(f"the check_log child for {tree} failed ({code}):\n{output[-3000:]}")
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def measure_cli(tree: Path, log: Path) -> dict[str, Any]:
    seconds, peak, code, output = _run([sys.executable, "-P", "-c", CLI, "check", str(log)], tree, 600)
    if code not in (0, 1):
        raise SystemExit(f"benchbase check for {tree} failed ({code}):\n{output[-3000:]}")
    return {"seconds": seconds, "peak_kib": peak, "passed": code == 0}


def measure_official(log: Path) -> dict[str, Any]:
    """mlperf-logging's compliance checker on the same log, end to end as `cli` is (interpreter,
    imports, the check), with the training 3.1.0 common rules as tests/official_checker.py runs
    them (only the list of MLPerf benchmark names set aside)."""
    tests = Path(__file__).resolve().parents[1] / "tests"
    seconds, peak, code, output = _run([sys.executable, "-P", "-c", OFFICIAL, str(log), str(tests)],
                                       Path(__file__).resolve().parents[1], 1800)
    if code != 0:
        raise SystemExit(f"the official checker's child failed ({code}):\n{output[-3000:]}")
    return {"seconds": seconds, "peak_kib": peak, "passed": output.strip().splitlines()[-1] == "True"}


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a source tree to measure (repeatable); default: after=<this checkout>")
    parser.add_argument("--size-mb", type=float, default=100.0, help="the synthetic log's size (MB, 10^6 bytes)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--workload", default="ds2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="api,cli", help="api, cli, official (mlperf-logging's own checker on the "
                        "same log, once per repeat), comma-separated")
    parser.add_argument("--log", type=Path, help="write the log here and keep it (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    trees = [tuple(spec.split("=", 1)) for spec in args.tree] or [("after", str(Path(__file__).resolve().parents[1]))]
    modes = [mode for mode in args.modes.split(",") if mode]
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {platform.node()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; trees: {', '.join(f'{name}={tree}' for name, tree in trees)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="check-scaling-") as scratch:
        from benchbase.run_folder import RunFolder

        log = args.log or RunFolder(Path(scratch)).compliance_log
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        shape = write_log(log, args.workload, args.size_mb, args.epochs)
        print(f"log: {log}, {shape['bytes'] / MB:.1f} MB, {shape['lines']} lines, {shape['epochs']} epochs of "
              f"{shape['batches_per_epoch']} batches (written in {time.perf_counter() - started:.1f} s)", flush=True)
        tree_modes = [mode for mode in modes if mode != "official"]
        results: dict[str, dict[str, list[dict[str, Any]]]] = {name: {mode: [] for mode in tree_modes}
                                                                for name, _ in trees}
        if "official" in modes:
            results[OFFICIAL_NAME] = {"official": []}
        for repeat in range(args.repeats):
            if "official" in modes:  # first in each repeat, then the trees: drift hits all alike
                run = measure_official(log)
                results[OFFICIAL_NAME]["official"].append(run)
                print(f"repeat {repeat + 1} {OFFICIAL_NAME}: {run['seconds']:.2f} s, peak RSS "
                      f"{run['peak_kib'] / 1024:.0f} MiB, passed {run['passed']}", flush=True)
            for name, tree in trees:  # trees alternate, so drift on a shared machine hits each alike
                for mode in tree_modes:
                    run = (measure_api if mode == "api" else measure_cli)(Path(tree), log)
                    results[name][mode].append(run)
                    extra = (f", RSS before {run['before_kib'] / 1024:.0f} MiB, from {Path(run['benchbase']).parent}"
                             if mode == "api" else "")
                    print(f"repeat {repeat + 1} {name} {mode}: {run['seconds']:.2f} s, peak RSS "
                          f"{run['peak_kib'] / 1024:.0f} MiB{extra}, passed {run['passed']}", flush=True)
    summary = _summary(results, shape)
    print(_table(summary, trees, tree_modes))
    if args.json:
        args.json.write_text(json.dumps({"shape": shape, "python": platform.python_version(), "runs": results,
                                         "summary": summary}, indent=2))


def _summary(results: dict[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for name, by_mode in results.items():
        summary[name] = {}
        for mode, runs in by_mode.items():
            row = {"seconds": _median([run["seconds"] for run in runs]),
                   "peak_mib": _median([run["peak_kib"] / 1024 for run in runs])}
            if mode == "api":
                own = _median([(run["peak_kib"] - run["before_kib"]) * 1024 for run in runs])
                row["own_peak_mib"] = own / 2**20
                row["own_peak_per_log_byte"] = own / shape["bytes"]
            summary[name][mode] = row
    return summary


def _table(summary: dict[str, Any], trees: list[tuple[str, ...]], modes: list[str]) -> str:
    rows = ["| tree | mode | wall s (median) | peak RSS MiB (median) | check's own peak MiB | own peak / log size |",
            "|---|---|---:|---:|---:|---:|"]
    for name, _ in trees:
        for mode in modes:
            row = summary[name][mode]
            own = f"{row['own_peak_mib']:.0f}" if "own_peak_mib" in row else "-"
            ratio = f"{row['own_peak_per_log_byte']:.1f}x" if "own_peak_per_log_byte" in row else "-"
            rows.append(f"| {name} | {mode} | {row['seconds']:.2f} | {row['peak_mib']:.0f} | {own} | {ratio} |")
    official = summary.get(OFFICIAL_NAME, {}).get("official")
    if official is not None:
        rows.append(f"| {OFFICIAL_NAME} | official | {official['seconds']:.2f} | {official['peak_mib']:.0f} | - | - |")
        for name, _ in trees:
            if "cli" in summary[name]:
                cli = summary[name]["cli"]
                time_ratio, memory_ratio = official["seconds"] / cli["seconds"], official["peak_mib"] / cli["peak_mib"]
                rows.append(f"| {OFFICIAL_NAME} / {name} | official / cli | {time_ratio:.2f}x | {memory_ratio:.2f}x "
                            "| | |")
    if len(trees) == 2:
        (first, _), (second, _) = trees
        for mode in modes:
            a, b = summary[first][mode], summary[second][mode]
            rows.append(f"| {first} / {second} | {mode} | {a['seconds'] / b['seconds']:.2f}x | "
                        f"{a['peak_mib'] / b['peak_mib']:.2f}x | "
                        + (f"{a['own_peak_mib'] / b['own_peak_mib']:.2f}x | |" if mode == "api" else "- | |"))
    return "\n".join(rows)


if __name__ == "__main__":
    main()
