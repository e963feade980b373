"""Time a mini workload's training step in every backend side by side (torch, tf, jax).

The backends are built in this one process with the cpu profile's device plan and trained on
the very same batches from the harness's pipeline, step by step in rotating order, so that a
noisy, shared machine slows all alike. A first, untimed pass over every batch lets tracing and
compilation happen (JAX compiles once per shape bucket); its seconds are printed beside the
steady-state median step time of each backend and its ratio to PyTorch's.

    python benchmarks/backend_parity.py                      # ds2-mini on the cached synthetic store
    python benchmarks/backend_parity.py --workload conformer-mini --batches 20
    python benchmarks/backend_parity.py --store DIR --batches 40 --keras-lstm --backends torch,tf
    python benchmarks/backend_parity.py --backends torch,tf --precisions fp32,bf16,int8-emulated
    python benchmarks/backend_parity.py --workload rnnt-mini --backends tf --fused-lstm --precisions fp32,bf16
    python benchmarks/backend_parity.py --workload conformer-mini --backends tf --xla-forward

With several precisions every backend is built once per precision (the workload's model with
`precision` replaced), and the rows are timed in the same rotation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchbase.backend import Backend, Batch, BuildContext, DevicePlan
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.harness.host_memory import keep_host_memory_on_cpus
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import HardwareProfile, WorkloadSpec
from benchbase.specs.model import PRECISIONS, ModelSpec

PROFILE = "cpu"


def main() -> None:
    arguments = _parser().parse_args()
    registry = collect_registry(get_plugin_manager())
    workload, profile = registry.workload(arguments.workload), registry.profile(PROFILE)
    store = arguments.store or ensure_workload_data(workload, None, default_cache())
    batches = training_batches(store, workload.model, profile.pipeline.global_batch, arguments.batches, arguments.seed)
    plan = cpu_plan(profile, arguments.threads)
    keep_host_memory_on_cpus(plan)  # as a run on CPUs does, for every backend alike
    precisions = arguments.precisions.split(",") if arguments.precisions else [workload.model.precision]
    unknown = [precision for precision in precisions if precision not in PRECISIONS]
    if unknown:
        raise SystemExit(f"backend_parity.py: --precisions: {', '.join(unknown)} not one of {', '.join(PRECISIONS)}")
    backends = _backends(registry, arguments.backends.split(","), arguments.keras_lstm, arguments.fused_lstm,
                         arguments.xla_forward, precisions)
    first_pass = {}
    for name, (backend, precision) in backends.items():
        started = time.perf_counter()
        backend.build(build_context(workload, precision, plan, store, arguments.seed))
        if name.startswith(XLA_ROW):
            backend.family = _XlaForward(backend.family)  # before the first step traces the train function
        for batch in batches:
            backend.train_step(batch)
        first_pass[name] = time.perf_counter() - started
    times = time_steps({name: backend for name, (backend, _) in backends.items()}, batches)
    _print_table(workload.name, times, first_pass, store, plan, batches)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="ds2-mini", help="a registered workload (default: ds2-mini)")
    parser.add_argument("--store", type=Path, help="prepared feature store (default: the cached synthetic one)")
    parser.add_argument("--batches", type=int, default=30, help="timed training steps per backend")
    parser.add_argument("--backends", default="torch,tf,jax", help="comma-separated registered backends")
    parser.add_argument("--threads", type=int, help="compute threads (default: the cpu profile's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precisions", help=f"comma-separated, of {', '.join(PRECISIONS)} "
                                             "(default: the workload's)")
    parser.add_argument("--keras-lstm", action="store_true",
                        help="also time TF with Keras's own LSTM (a tf.while_loop) instead of the fused kernel")
    parser.add_argument("--fused-lstm", action="store_true",
                        help="also time TF with the fused BlockLSTMV2 kernel (for a family whose default is Keras's)")
    parser.add_argument("--xla-forward", action="store_true",
                        help="also time TF with the model's training forward compiled by XLA (the loss outside it)")
    return parser


def cpu_plan(profile: HardwareProfile, threads: int | None) -> DevicePlan:
    """One CPU device with the profile's batch, on ``threads`` compute threads (default: the profile's)."""
    return DevicePlan(kind="cpu", count=1, batch_per_device=profile.pipeline.batch_per_device,
                      threads=threads or profile.pipeline.threads)


def build_context(workload: WorkloadSpec, precision: str, plan: DevicePlan, store: Path, seed: int) -> BuildContext:
    """What ``build()`` gets for ``workload``'s model in ``precision``, bounded by the store's longest utterance."""
    longest_frames, longest_labels = FeatureStore(store).longest(workload.data.train + workload.data.dev)
    return BuildContext(model=workload.model.model_copy(update={"precision": precision}),
                        optimizer=workload.optimizer, feature_dimension=workload.features.dimension,
                        plan=plan, seed=seed, max_frames=longest_frames, max_label_length=longest_labels)


def training_batches(store: Path, model: ModelSpec, batch_size: int, count: int, seed: int) -> list[Batch]:
    """The harness pipeline's first ``count`` training batches (epochs 1, 2, ... as needed)."""
    pipeline = BatchPipeline(FeatureStore(store), ("train",), batch_size, model=model, seed=seed)
    batches: list[Batch] = []
    epoch = 1
    while len(batches) < count:
        batches += list(pipeline.epoch(epoch))[: count - len(batches)]
        epoch += 1
    return batches


def _backends(registry, names: list[str], keras_lstm: bool, fused_lstm: bool, xla_forward: bool,
              precisions: list[str]) -> dict[str, tuple[Backend, str]]:
    """Row label -> (a fresh backend, the precision it is built in)."""
    backends: dict[str, tuple[Backend, str]] = {}
    for precision in precisions:
        suffix = f" {precision}" if len(precisions) > 1 else ""
        for name in names:
            backends[name + suffix] = (registry.backend(name)(), precision)
        if keras_lstm:
            backends["tf (Keras LSTM loop)" + suffix] = (registry.backend("tf")(fused_lstm=False), precision)
        if fused_lstm:
            backends["tf (fused LSTM kernel)" + suffix] = (registry.backend("tf")(fused_lstm=True), precision)
        if xla_forward:
            backends[XLA_ROW + suffix] = (registry.backend("tf")(), precision)
    return backends


XLA_ROW = "tf (forward under XLA)"


class _XlaForward:
    """A TensorFlow family whose training forward is compiled by XLA (``tf.function(jit_compile=True)``)
    inside the backend's train function, the loss outside it: TensorFlow's sparse CTC kernel has no
    XLA kernel. XLA compiles each batch shape anew (the first pass holds those compilations). Not
    the backend's own path: a lever measured here, for a family whose forward XLA can compile (the
    Conformer's; DS2's and RNN-T's LSTM kernels are not all XLA's)."""

    def __init__(self, family) -> None:
        self._family = family

    def __getattr__(self, name: str):
        return getattr(self._family, name)

    def utterance_losses(self, model, *arguments):
        return self._family.utterance_losses(_XlaModel(model), *arguments)


class _XlaModel:
    """``model`` called through one XLA-compiled function; its attributes (``spec``) as they are."""

    def __init__(self, model) -> None:
        import tensorflow as tf

        self._model = model
        self._compiled = tf.function(model.__call__, jit_compile=True)

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def __call__(self, *arguments, **keywords):
        return self._compiled(*arguments, **keywords)


def time_steps(backends: dict[str, Backend], batches: list[Batch]) -> dict[str, list[float]]:
    """Each backend's seconds per step on every batch, the backends alternating in rotating order."""
    times: dict[str, list[float]] = {name: [] for name in backends}
    names = list(backends)
    for index, batch in enumerate(batches):
        # Rotate who goes first, so none always runs right after another's cache misses.
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            backends[name].train_step(batch)
            times[name].append(time.perf_counter() - started)
    return times


def _print_table(workload: str, times: dict[str, list[float]], first_pass: dict[str, float], store: Path,
                 plan: DevicePlan, batches: list[Batch]) -> None:
    frames = statistics.median(batch.features.shape[1] for batch in batches)
    print(f"{workload} training step, {len(batches)} batches of {batches[0].size} (median {frames:.0f} frames), "
          f"{plan.threads} thread(s), store {store}")
    reference = statistics.median(times[next(iter(times))])
    print(f"{'backend':<30}{'median ms':>12}{'p25 ms':>10}{'p75 ms':>10}{'/ first':>10}{'first pass s':>14}")
    for name, seconds in times.items():
        p25, _, p75 = statistics.quantiles(seconds, n=4)
        median = statistics.median(seconds)
        print(f"{name:<30}{median * 1e3:>12.1f}{p25 * 1e3:>10.1f}{p75 * 1e3:>10.1f}{median / reference:>10.2f}"
              f"{first_pass[name]:>14.1f}")


if __name__ == "__main__":
    main()
