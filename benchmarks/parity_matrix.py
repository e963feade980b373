"""The framework parity matrix: every family's mini workload x every backend that declares it x
every precision this CPU runs, timed side by side, each cell split into stages by its framework's
own profiler.

    python benchmarks/parity_matrix.py                                  # the whole matrix
    python benchmarks/parity_matrix.py --workloads conformer-mini --backends torch,jax --steps 20
    python benchmarks/parity_matrix.py --json parity.json

The cells come from the registry (``plan_rows``): for every registered model family, its
workloads whose name ends in ``-mini``; for each, every installed backend whose capabilities
declare the family, in fp32 and, where the CPU has bf16 kernels (AVX-512 BF16 or AMX BF16),
in bf16 for the backends that declare it. A row (one workload in one precision) builds its
backends in this one process on the cpu profile's device plan with one compute thread, trains
them on the same batches from the harness's pipeline (an untimed first pass compiles and traces),
then times ``--steps`` steps with the backends alternating in rotating order
(``backend_parity.time_steps``). Each cell: the median step, p25-p75, the ratio to the row's
fastest median, and a split of the step into forward, backward, optimizer update,
host-to-device copy and other, measured after the timed steps, so it never slows them:

- torch: ``torch.profiler`` over ``--profile-steps`` further steps; the operations directly
  under each step's mark: autograd's ``evaluate_function`` events are backward (on a CPU the
  engine runs on the calling thread), ``Optimizer.*`` the update, copies (``aten::to``,
  ``aten::_to_copy``, ``aten::copy_``) before the backward pass host-to-device, the rest before
  it forward, after it other; the step's time outside every operation is other too.
- tf: ``tf.profiler.experimental`` (its XPlane trace) over the same steps; every executed
  operation's wall time in which it is the outermost one running, on any thread (an operation
  inside another, or overlapping an earlier one on another thread, adds nothing, so the stages
  add up to at most the step): names under ``gradient_tape/`` and gradient kernels (``*Grad*``,
  ``*Backprop*``) are backward, the optimizer's resource updates (``ResourceApply*``,
  ``Assign*VariableOp`` and names under the optimizer's scope) the update, ``_Recv``/``_Send``/``MemcpyHtoD``
  host-to-device, the rest forward; the step's time outside them is other.
- jax: XLA compiles the whole step into one program, whose parts no profiler names by stage,
  so the family's batch loss, its gradient and the optimizer's update are jitted separately
  (the same functions the backend's step composes, ``benchbase_jax_ds2.training``) and timed
  on the same padded batches and state: forward is the loss, backward the gradient less the
  loss, update the optimizer's, host-to-device the batch's padding and ``device_put``; other is
  the timed step's median less those (negative where the fused step beats its parts). The
  backend's own step is untouched.

Like a run on CPUs, the matrix has glibc's malloc keep the large blocks it frees, for every
backend alike (``benchbase.harness.host_memory``; ``KEEP_FREED_HOST_MEMORY = False`` there
measures glibc's defaults).

A cell over 1.25x its row's fastest also lists its ten costliest operations by self time from
the same profile (for JAX, the XLA thunks of ``jax.profiler``'s trace of the real step).
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # benchbase from this checkout, when run as a script
sys.path.insert(1, str(REPO / "benchmarks"))  # backend_parity beside it

from backend_parity import PROFILE, build_context, cpu_plan, time_steps, training_batches  # noqa: E402

from benchbase.backend import Backend, Batch, Capabilities  # noqa: E402
from benchbase.errors import InputError  # noqa: E402
from benchbase.harness import host_memory  # noqa: E402
from benchbase.specs import WorkloadSpec  # noqa: E402

STAGES = ("forward", "backward", "optimizer", "host-to-device", "other")
SLOW_RATIO = 1.25
"""A cell this much slower than its row's fastest lists its costliest operations."""
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""/proc/cpuinfo flags of bf16 kernels (x86's AVX-512 BF16 and AMX BF16, ARM's BF16)."""
STEP_MARK = "parity_matrix.step"


class Row(NamedTuple):
    """One workload in one precision, and the backends timed against each other in it."""

    workload: str
    family: str
    precision: str
    backends: tuple[str, ...]


def cpu_precisions(flags: Iterable[str]) -> tuple[str, ...]:
    """fp32, and bf16 where the CPU's flags name bf16 kernels."""
    return ("fp32", "bf16") if BF16_FLAGS & set(flags) else ("fp32",)


def plan_rows(workloads: Mapping[str, WorkloadSpec], families: Iterable[str],
              capabilities: Mapping[str, Capabilities], precisions: Iterable[str]) -> list[Row]:
    """Every family's ``-mini`` workloads x ``precisions``, each with every backend (name ->
    capabilities) that declares the family in that precision. A family without a mini workload
    is an InputError: the matrix would leave it out silently."""
    rows = []
    for family in sorted(families):
        minis = sorted(name for name, spec in workloads.items()
                       if spec.model.family == family and name.endswith("-mini"))
        if not minis:
            raise InputError(f"family {family!r} has no registered -mini workload for the parity matrix")
        for workload in minis:
            for precision in precisions:
                backends = tuple(name for name, declared in sorted(capabilities.items())
                                 if family in declared.families and precision in declared.precisions_of(family))
                if backends:
                    rows.append(Row(workload, family, precision, backends))
    return rows


def main() -> None:
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry
    from benchbase.specs.model import model_families
    from benchbase.telemetry.cpu_features import cpu_flags

    arguments = _parser().parse_args()
    if host_memory.KEEP_FREED_HOST_MEMORY:  # read now, so that a caller may turn it off first
        host_memory.keep_freed_host_memory()
    registry = collect_registry(get_plugin_manager())
    classes = _installed_backends(registry, arguments.backends)
    rows = plan_rows(registry.workloads, model_families(), {name: cls.capabilities for name, cls in classes.items()},
                     cpu_precisions(cpu_flags()))
    if arguments.workloads:
        rows = [row for row in rows if row.workload in arguments.workloads.split(",")]
    results = []
    for row in rows:
        result = measure_row(registry, classes, row, arguments)
        _print_row(result)
        results.append(result)
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", help="comma-separated mini workloads (default: every family's)")
    parser.add_argument("--backends", help="comma-separated registered backends (default: every installed one)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per cell (default: 30)")
    parser.add_argument("--profile-steps", type=int, default=5, help="profiled steps per cell (default: 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the matrix to this JSON file")
    return parser


def _installed_backends(registry, names: str | None) -> dict[str, type[Backend]]:
    """name -> class of every registered backend (or of ``names``) whose framework imports."""
    classes = {}
    for name in names.split(",") if names else sorted(registry.backends):
        try:
            classes[name] = registry.backend(name)
        except ImportError as error:  # not installed here: the row says so by its absence
            print(f"backend {name}: not installed ({error})", file=sys.stderr)
    return classes


def measure_row(registry, classes: Mapping[str, type[Backend]], row: Row, arguments) -> dict:
    """Build, warm, time and profile every backend of ``row``; the row as a JSON-ready dict."""
    from benchbase.data.workload_data import default_cache, ensure_workload_data

    workload, profile = registry.workload(row.workload), registry.profile(PROFILE)
    store = ensure_workload_data(workload, None, default_cache())
    batches = training_batches(store, workload.model, profile.pipeline.global_batch,
                               arguments.steps + arguments.profile_steps, arguments.seed)
    timed, profiled = batches[: arguments.steps], batches[arguments.steps:]
    plan = cpu_plan(profile, threads=1)
    backends = {}
    for name in row.backends:
        backend = backends[name] = classes[name]()
        backend.build(build_context(workload, row.precision, plan, store, arguments.seed))
        for batch in batches:  # tracing, compilation and every padded shape, before the clock
            backend.train_step(batch)
    times = time_steps(backends, timed)
    medians = {name: statistics.median(seconds) for name, seconds in times.items()}
    fastest = min(medians.values())
    cells = {}
    for name, backend in backends.items():
        p25, _, p75 = statistics.quantiles(times[name], n=4)
        slow = medians[name] > SLOW_RATIO * fastest
        stages, operations = PROFILERS[name](backend, profiled, medians[name], slow) if name in PROFILERS else ({}, [])
        cells[name] = {"median_ms": 1e3 * medians[name], "p25_ms": 1e3 * p25, "p75_ms": 1e3 * p75,
                       "ratio": medians[name] / fastest, "stages_ms": stages, "top_operations": operations}
    frames = statistics.median(batch.features.shape[1] for batch in timed)
    return {**row._asdict(), "steps": len(timed), "batch": timed[0].size, "median_frames": frames, "cells": cells}


# -- torch -------------------------------------------------------------------------------------------

TORCH_COPIES = ("aten::to", "aten::_to_copy", "aten::copy_")


def torch_stages(backend: Backend, batches: list[Batch], step_s: float, slow: bool) -> tuple[dict, list]:
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for batch in batches:
            with record_function(STEP_MARK):
                backend.train_step(batch)
    totals: dict[str, float] = defaultdict(float)
    steps = [event for event in profiler.events() if event.name == STEP_MARK]
    for step in steps:
        backward_started = False
        for child in sorted(step.cpu_children, key=lambda event: event.time_range.start):
            stage = _torch_stage(child.name, backward_started)
            backward_started = backward_started or stage == "backward"
            totals[stage] += child.time_range.elapsed_us() / 1e3
        totals["other"] += step.time_range.elapsed_us() / 1e3 - sum(
            child.time_range.elapsed_us() / 1e3 for child in step.cpu_children)
    stages = {stage: totals[stage] / len(steps) for stage in STAGES}
    operations = []
    if slow:
        averages = sorted((event for event in profiler.key_averages() if event.key != STEP_MARK),
                          key=lambda event: -event.self_cpu_time_total)[:10]
        operations = [{"name": event.key, "self_ms": event.self_cpu_time_total / 1e3 / len(steps)}
                      for event in averages]
    return stages, operations


def _torch_stage(name: str, backward_started: bool) -> str:
    if "autograd::engine" in name or name.endswith("Backward0"):
        return "backward"
    if name.startswith("Optimizer."):
        return "optimizer"
    if backward_started:
        return "other"
    return "host-to-device" if name in TORCH_COPIES else "forward"


# -- tf ----------------------------------------------------------------------------------------------

TF_UPDATES = ("ResourceApply", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
TF_COPIES = ("_Recv", "_Send", "MemcpyHtoD", "_HostRecv", "_HostSend")
TF_CALLS = ("PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile", "If", "StatelessIf")
"""Operations that run other operations (a tf.function's call, a loop): counted through what they run."""


def tf_stages(backend: Backend, batches: list[Batch], step_s: float, slow: bool) -> tuple[dict, list]:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as folder:
        tf.profiler.experimental.start(folder)
        for batch in batches:
            with tf.profiler.experimental.Trace(STEP_MARK):
                backend.train_step(batch)
        tf.profiler.experimental.stop()
        operations, step_ms = _xplane_operations(next(Path(folder).glob("plugins/profile/*/*.xplane.pb")))
    totals: dict[str, float] = defaultdict(float)
    by_type: dict[str, float] = defaultdict(float)
    for name, kind, milliseconds in operations:
        totals[_tf_stage(name, kind)] += milliseconds
        by_type[kind] += milliseconds
    steps = len(batches)
    stages = {stage: totals[stage] / steps for stage in STAGES}
    stages["other"] = step_ms / steps - sum(totals.values()) / steps
    top = sorted(by_type.items(), key=lambda item: -item[1])[:10] if slow else []
    return stages, [{"name": kind, "self_ms": milliseconds / steps} for kind, milliseconds in top]


def _tf_stage(name: str, kind: str) -> str:
    if kind.startswith(TF_COPIES):
        return "host-to-device"
    if kind.startswith(TF_UPDATES) or "optimizer" in name.lower():
        return "optimizer"
    # A gradient's operations are under the tape's scope, or are the kernels TensorFlow registers
    # as an operation's gradient (BlockLSTMGradV2, Conv2DBackpropFilter, ReluGrad), whose names
    # follow their op's scope instead.
    backward = "gradient_tape/" in name or "Grad" in kind or "Backprop" in kind
    return "backward" if backward else "forward"


def _is_operation(label: str) -> bool:
    """An executed operation's event ("name:Type"), not the runtime's ("::") nor a call of others:
    a function's call is traced as "LABEL: __inference_train_N" (a label, a space, the function), and
    its operations, on the executor's threads, are the ones to count."""
    name, _, kind = label.rpartition(":")
    return (bool(name) and "::" not in label and kind == kind.lstrip() and kind not in TF_CALLS
            and not name.startswith("__inference") and not kind.startswith("__inference"))


def _xplane_operations(path: Path) -> tuple[list[tuple[str, str, float]], float]:
    """(name, type, ms) of the executed operations (``_is_operation``) and the steps' marked ms,
    from a TensorFlow profile. Each operation gets the wall time in which it is the outermost one
    running: an operation nested in another, on its line or on another thread's (TensorFlow runs a
    function's operations on other threads than its caller's), adds nothing, and two operations
    overlapping on two threads share the time between them, so the operations' times add up to at
    most the time something ran, never more."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TensorFlow's own profile format

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    plane = next(plane for plane in space.planes if plane.name == "/host:CPU")
    names = {key: value.name for key, value in plane.event_metadata.items()}
    events, step_ms = [], 0.0
    for line in plane.lines:
        origin_ps = line.timestamp_ns * 1000
        for event in line.events:
            label = names[event.metadata_id]
            if label == STEP_MARK:
                step_ms += event.duration_ps / 1e9
            elif _is_operation(label):
                events.append((origin_ps + event.offset_ps, origin_ps + event.offset_ps + event.duration_ps, label))
    owned = outermost_wall_time([(start, end) for start, end, _ in events])
    operations = []
    for (_, _, label), picoseconds in zip(events, owned):
        if picoseconds:
            name, _, kind = label.rpartition(":")
            operations.append((name, kind, picoseconds / 1e9))
    return operations, step_ms


def outermost_wall_time(intervals: list[tuple[int, int]]) -> list[int]:
    """For each (start, end) interval, the length of time in which it is the outermost one
    running: the earliest started of those covering that time (on a tie the longest). The
    results add up to the length of the intervals' union."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1]))
    owned = [0] * len(intervals)
    running: list[tuple[int, int, int]] = []  # a heap of (start, -end, index): its top is the outermost
    boundaries = sorted({point for interval in intervals for point in interval})
    following = 0
    for left, right in zip(boundaries, boundaries[1:]):
        while following < len(order) and intervals[order[following]][0] <= left:
            index = order[following]
            heapq.heappush(running, (intervals[index][0], -intervals[index][1], index))
            following += 1
        while running and -running[0][1] <= left:
            heapq.heappop(running)
        if running:
            owned[running[0][2]] += right - left
    return owned


# -- jax ---------------------------------------------------------------------------------------------


def jax_stages(backend: Backend, batches: list[Batch], step_s: float, slow: bool) -> tuple[dict, list]:
    parts = _JaxParts(backend)
    for batch in batches:  # compile each part for every padded shape
        parts.time(batch)
    totals: dict[str, float] = defaultdict(float)
    for batch in batches:
        for stage, seconds in parts.time(batch).items():
            totals[stage] += seconds * 1e3 / len(batches)
    stages = {"forward": totals["forward"], "backward": totals["gradient"] - totals["forward"],
              "optimizer": totals["optimizer"], "host-to-device": totals["host-to-device"]}
    stages["other"] = step_s * 1e3 - totals["gradient"] - totals["optimizer"] - totals["host-to-device"]
    return stages, _jax_thunks(backend, batches) if slow else []


class _JaxParts:
    """The backend's loss, its gradient and the optimizer's update, each jitted alone, on its state.
    Reads the backend's private members: a measurement of its parts, not a use of its contract."""

    def __init__(self, backend: Backend) -> None:
        import jax
        import optax
        from benchbase_jax_ds2.arithmetic import in_precision
        from benchbase_jax_ds2.optimizers import make_optimizer

        spec, self._backend = backend.context.model, backend
        batch_loss = backend._family.make_batch_loss(spec, backend.device.platform)
        optimizer = make_optimizer(backend.context.optimizer)

        def loss(parameters, statistics, batch, key):
            return batch_loss(parameters, statistics, batch, key)[0]

        def update(gradients, optimizer_state, parameters, learning_rate):
            updates, _ = optimizer.update(gradients, optimizer_state, parameters, learning_rate=learning_rate)
            return optax.apply_updates(parameters, updates)

        self._forward = jax.jit(in_precision(spec, loss))
        self._gradient = jax.jit(in_precision(spec, jax.grad(loss)))
        self._update = jax.jit(update)
        self._key = jax.random.key(0)

    def time(self, batch: Batch) -> dict[str, float]:
        import jax
        from benchbase_jax_ds2.optimizers import next_learning_rate

        backend = self._backend
        state = backend._state
        rate = next_learning_rate(backend.context.optimizer, state.optimizer)
        seconds = {}
        started = time.perf_counter()
        padded = jax.block_until_ready(backend._padded(batch))
        seconds["host-to-device"] = time.perf_counter() - started
        arguments = (state.parameters, state.statistics, padded, self._key)
        for stage, function in (("forward", self._forward), ("gradient", self._gradient)):
            started = time.perf_counter()
            result = jax.block_until_ready(function(*arguments))
            seconds[stage] = time.perf_counter() - started
        started = time.perf_counter()
        jax.block_until_ready(self._update(result, state.optimizer, state.parameters, rate))
        seconds["optimizer"] = time.perf_counter() - started
        return seconds


def _jax_thunks(backend: Backend, batches: list[Batch]) -> list[dict]:
    """The ten costliest XLA thunks by self time in ``jax.profiler``'s trace of the backend's own steps."""
    import jax
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            for batch in batches:
                backend.train_step(batch)
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(Path(folder).glob("plugins/profile/*/*.xplane.pb")).read_bytes())
    plane = next(plane for plane in space.planes if plane.name == "/host:CPU")
    names = {key: value.name for key, value in plane.event_metadata.items()}
    totals: dict[str, float] = defaultdict(float)
    for line in plane.lines:
        if not line.name.startswith("tf_XLA"):
            continue
        for event in line.events:
            name = names[event.metadata_id]
            if "::" not in name and not name.startswith("end: "):
                totals[name] += event.duration_ps / 1e9 / len(batches)
    top = sorted(totals.items(), key=lambda item: -item[1])[:10]
    return [{"name": name, "self_ms": milliseconds} for name, milliseconds in top]


PROFILERS = {"torch": torch_stages, "tf": tf_stages, "jax": jax_stages}
"""Backend name -> its stage split; a backend without one is timed, not split."""


def _print_row(result: dict) -> None:
    print(f"\n{result['workload']} {result['precision']}: {result['steps']} steps of {result['batch']} "
          f"(median {result['median_frames']:.0f} frames), 1 thread")
    print(f"{'backend':<10}{'median ms':>11}{'p25-p75 ms':>16}{'ratio':>7}" + "".join(f"{s:>16}" for s in STAGES))
    for name, cell in result["cells"].items():
        spread = f"{cell['p25_ms']:.1f}-{cell['p75_ms']:.1f}"
        stages = "".join(f"{cell['stages_ms'].get(stage, float('nan')):>16.1f}" for stage in STAGES)
        print(f"{name:<10}{cell['median_ms']:>11.1f}{spread:>16}{cell['ratio']:>7.2f}{stages}")
    for name, cell in result["cells"].items():
        if cell["top_operations"]:
            listed = ", ".join(f"{op['name']} {op['self_ms']:.1f}" for op in cell["top_operations"])
            print(f"  {name}, costliest operations (self ms per step): {listed}")


if __name__ == "__main__":
    main()
