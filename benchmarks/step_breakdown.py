"""Where the milliseconds of a training step go, on `cpu` against `cpu2`.

    python benchmarks/step_breakdown.py [--steps 20] [--out runs/breakdown]            # PyTorch
    python benchmarks/step_breakdown.py --backend tf [--steps 20] [--out runs/breakdown-tf]

Runs ds2-mini one epoch on each profile with `benchbase run --profile-steps STEPS` (rank 0's
torch.profiler trace of steps 3 to STEPS + 2), then splits rank 0's profiled time into the
top-level operations of its main thread (the forward pass, and the backward pass, which the
autograd engine runs on the calling thread on a CPU), grouped:

- lstm, conv, ctc, dropout, batchnorm, other ops: compute (forward and backward together; the
  synchronized BatchNorm of `cpu2` computes its statistics with elementwise operations, which
  fall under other ops);
- batchnorm all-reduce: the synchronized BatchNorm's statistics (torch.distributed.nn's
  differentiable all_reduce, forward and backward), blocking: each is a barrier with the other rank;
- gradient all-reduce: what the main thread spends in DDP's bucketed all-reduces (the hook runs
  them on gloo's threads, overlapped with the backward pass; the main thread waits at the end);
- optimizer: the optimizer's step;
- unaccounted: the profiled wall time left over (Python between operations, the harness's
  per-batch verdict all-reduce, the profiler's own cost).

The data wait is the harness's own measurement (metrics.jsonl's wait_s over the same steps). The
profiler slows the steps it covers: the shares, not the milliseconds, are the result.

TensorFlow (``--backend tf``) runs both replicas of `cpu2` in one process, their operations on
its inter-op threads (one per device), so its table is of device time: the TensorBoard profile's
top-level operations on the compute threads, summed by type over both devices, against the
devices' capacity (threads x the `train` calls' wall time); what no operation used is idle.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

GROUPS = (
    ("batchnorm all-reduce", ("_AllReduce",)),
    ("gradient all-reduce", ("c10d::allreduce_",)),
    ("batchnorm", ("batch_norm", "BatchNorm", "var_mean")),
    ("lstm", ("lstm", "rnn", "Rnn")),
    ("conv", ("conv", "Convolution")),
    ("ctc", ("ctc", "Ctc")),
    ("dropout", ("dropout", "bernoulli")),
    ("optimizer", ("Optimizer.step",)),
)


TF_GROUPS = (
    ("lstm", ("BlockLSTM",)),
    ("conv", ("Conv2D",)),
    ("ctc", ("CTCLoss",)),
    ("dropout", ("StatelessRandom",)),
    ("all-reduce and copies between devices", ("AddN", "_Send", "_Recv", "Collective", "AllReduce")),
    ("optimizer", ("ResourceApply",)),
)


def main() -> None:
    arguments = _arguments()
    if arguments.backend == "tf":
        _tensorflow(arguments)
        return
    rows = {}
    for profile in ("cpu", "cpu2"):
        run_dir = arguments.out / profile
        if not (run_dir / "profile" / "torch-trace.json").is_file():
            _profiled_run("torch", profile, arguments.steps, run_dir)
        rows[profile] = breakdown(run_dir, arguments.steps)
    groups = [name for name, _ in GROUPS] + ["other ops", "unaccounted", "data wait"]
    print(f"ds2-mini, torch, rank 0, {arguments.steps} profiled steps; ms per step (share of the step)\n")
    print("| part | " + " | ".join(rows) + " |\n|---|" + "---:|" * len(rows))
    for group in groups:
        cells = [f"{row[group]:.1f} ({100 * row[group] / row['step']:.0f} %)" for row in rows.values()]
        print(f"| {group} | " + " | ".join(cells) + " |")
    print("| **step (profiled wall)** | " + " | ".join(f"**{row['step']:.1f}**" for row in rows.values()) + " |")


def breakdown(run_dir: Path, steps: int) -> dict[str, float]:
    """Milliseconds per step by group, from rank 0's trace and metrics."""
    trace = json.loads((run_dir / "profile" / "torch-trace.json").read_text())
    events = [event for event in trace["traceEvents"] if event.get("ph") == "X" and event.get("cat") != "Trace"]
    main_thread = max({event["tid"] for event in events}, key=lambda tid: sum(e["tid"] == tid for e in events))
    on_main = [event for event in events if event["tid"] == main_thread]
    optimizer = [(e["ts"], e["ts"] + e["dur"]) for e in on_main if e["name"].startswith("Optimizer.step")]
    operations = sorted((e for e in on_main if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    totals: dict[str, float] = defaultdict(float)
    end = float("-inf")
    for event in operations:  # top-level operations only: those not inside the one before
        if event["ts"] >= end:
            inside_step = any(start <= event["ts"] < stop for start, stop in optimizer)
            totals["optimizer" if inside_step else _group(event["name"])] += event["dur"] / 1000
            end = event["ts"] + event["dur"]
    wall = (max(e["ts"] + e["dur"] for e in on_main) - min(e["ts"] for e in on_main)) / 1000
    batches = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if '"kind": "batch"' in line]
    profiled = batches[2 : 2 + steps]  # steps 3 .. steps + 2, as the profiler covered them
    result = {group: value / steps for group, value in totals.items()}
    result["unaccounted"] = (wall - sum(totals.values())) / steps
    result["data wait"] = 1000 * sum(batch["wait_s"] for batch in profiled) / steps
    result["step"] = wall / steps
    for group in [name for name, _ in GROUPS] + ["other ops"]:
        result.setdefault(group, 0.0)
    return result


def _profiled_run(backend: str, profile: str, steps: int, run_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "benchbase", "run", "--workload", "ds2-mini", "--backend", backend,
                    "--hw", profile, "--max-epochs", "1", "--no-final-eval", "--profile-steps", str(steps),
                    "--out", str(run_dir)], check=False, capture_output=True)


def _tensorflow(arguments: argparse.Namespace) -> None:
    rows = {}
    for profile in ("cpu", "cpu2"):
        run_dir = arguments.out / profile
        if not list(run_dir.glob("profile/plugins/profile/*/*.xplane.pb")):
            _profiled_run("tf", profile, arguments.steps, run_dir)
        rows[profile] = tf_breakdown(run_dir, arguments.steps)
    groups = [name for name, _ in TF_GROUPS] + ["other ops", "idle"]
    print(f"ds2-mini, tf, {arguments.steps} profiled steps; device ms per step, both devices summed (share of "
          "the devices' capacity)\n")
    print("| part | " + " | ".join(rows) + " |\n|---|" + "---:|" * len(rows))
    for group in groups:
        cells = [f"{row[group]:.1f} ({100 * row[group] / row['capacity']:.0f} %)" for row in rows.values()]
        print(f"| {group} | " + " | ".join(cells) + " |")
    print("| **capacity (devices x step wall)** | " + " | ".join(f"**{row['capacity']:.1f}**" for row in rows.values())
          + " |")
    print("| step wall | " + " | ".join(f"{row['wall']:.1f}" for row in rows.values()) + " |")


def tf_breakdown(run_dir: Path, steps: int) -> dict[str, float]:
    """Device milliseconds per step by group, from the TensorBoard profile's host plane."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TensorFlow's own profile format

    space = xplane_pb2.XSpace()
    space.ParseFromString(next(run_dir.glob("profile/plugins/profile/*/*.xplane.pb")).read_bytes())
    plane = next(plane for plane in space.planes if plane.name == "/host:CPU")
    names = {key: value.name for key, value in plane.event_metadata.items()}
    totals: dict[str, float] = defaultdict(float)
    wall, threads = 0.0, 0
    for line in plane.lines:
        if line.name == "benchbase":  # the harness's thread: each train_step is one `train` call
            wall = sum(event.duration_ps for event in line.events if names[event.metadata_id] == "train") / 1e9
        if not line.name.startswith("tf_Compute"):
            continue
        threads += 1
        # An operation's event is "name:Type"; runtime events ("ExecutorState::Process") wrap them.
        operations = sorted(((event.offset_ps, event.duration_ps, names[event.metadata_id]) for event in line.events
                             if ":" in names[event.metadata_id] and "::" not in names[event.metadata_id]),
                            key=lambda event: (event[0], -event[1]))
        end = -1
        for start, duration, name in operations:  # top-level operations only
            if start >= end:
                totals[_tf_group(name.rsplit(":", 1)[-1])] += duration / 1e9
                end = start + duration
    result = {group: value / steps for group, value in totals.items()}
    for group in [name for name, _ in TF_GROUPS] + ["other ops"]:
        result.setdefault(group, 0.0)
    result["capacity"] = threads * wall / steps
    result["idle"] = result["capacity"] - sum(totals.values()) / steps
    result["wall"] = wall / steps
    return result


def _tf_group(operation_type: str) -> str:
    for group, markers in TF_GROUPS:
        if any(marker in operation_type for marker in markers):
            return group
    return "other ops"


def _group(name: str) -> str:
    for group, markers in GROUPS:
        if any(marker in name for marker in markers):
            return group
    return "other ops"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("torch", "tf"), default="torch")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/breakdown"))
    return parser.parse_args()


if __name__ == "__main__":
    main()
