"""CUDA graphs of the torch backend's training forward (``benchbase_torch_ds2.cuda_graphs``).

Where they serve is decided on any machine; that a graphed step trains as the eager one does
(losses, weights, BatchNorm's running statistics) needs a GPU: those tests are marked ``gpu``
(`make test-gpu`) and skip without one.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from benchbase.backend import BuildContext, DevicePlan
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.numerics.tolerances import BOTH_SIDES, accumulation_bound
from benchbase.plugin_host.builtins.workloads import builtin_workload

torch_backend = pytest.importorskip("benchbase_torch_ds2.backend")
from benchbase_torch_ds2.cuda_graphs import GraphedNetwork, SignatureGraphs  # noqa: E402

CUDA = DevicePlan(kind="cuda", count=1, batch_per_device=8)
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def context(workload_name: str, plan: DevicePlan, precision: str = "fp32", dropout: float | None = 0.0):
    workload = builtin_workload(workload_name)
    changes = {"precision": precision} | ({} if dropout is None else {"dropout": dropout})
    return BuildContext(model=workload.model.model_copy(update=changes), optimizer=workload.optimizer,
                        feature_dimension=workload.features.dimension, plan=plan, seed=0, max_frames=2000,
                        max_label_length=400)


@pytest.mark.parametrize(("workload", "plan", "precision", "serves"), [
    ("ds2-mini", CUDA, "bf16", True),
    ("conformer-mini", CUDA, "fp32", True),
    ("ds2-mini", dataclasses.replace(CUDA, cuda_graphs=False), "bf16", False),  # the profile's switch
    ("ds2-mini", CUDA, "int8-emulated", False),
    ("rnnt-mini", CUDA, "fp32", False),  # its family does not declare a capturable forward
    ("ds2-mini", dataclasses.replace(CUDA, world_size=2, count=2), "fp32", False),  # DDP stays eager
])
def test_where_graphs_serve(workload, plan, precision, serves):
    ctx = context(workload, plan, precision)
    family = torch_backend.FAMILIES.named(ctx.model.family)
    assert torch_backend._graphs_serve(ctx, family, torch.device("cuda", 0)) is serves
    assert torch_backend._graphs_serve(ctx, family, torch.device("cpu")) is False


def test_the_profile_switch_reaches_the_plan():
    from benchbase.harness.devices import device_plan
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    profile = collect_registry(get_plugin_manager()).profile("cpu")
    assert device_plan(profile).cuda_graphs is True
    off = profile.model_copy(update={"devices": profile.devices.model_copy(update={"cuda_graphs": False})})
    assert device_plan(off).cuda_graphs is False


def test_cpu_tensors_and_evaluation_run_eagerly():
    network = torch.nn.Linear(3, 2)
    graphed = GraphedNetwork(network)
    inputs = torch.randn(4, 3)
    assert torch.equal(graphed(inputs), network(inputs))
    network.eval()
    assert torch.equal(graphed(inputs), network(inputs))
    assert graphed.captured == 0 and not graphed.failures


def test_signatures_are_captured_once_up_to_the_bound_and_a_failed_capture_runs_eagerly(monkeypatch):
    """The bookkeeping both the network's and the transducer loss's graphs keep, with the allocator's
    two queries answered here (a CPU has no CUDA allocator): what the bound refuses is never
    captured, a failure is remembered as one line and not retried, memory is what reserved grew by."""
    reserved = iter([100, 164, 164, 164])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: next(reserved))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: None)
    graphs, calls = SignatureGraphs(max_graphs=2), []

    def capture(result):
        def run():
            calls.append(result)
            if result is None:
                raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
            return result
        return run

    device = torch.device("cpu")
    assert graphs.graph_for(("a",), device, capture(len)) is len
    assert graphs.graph_for(("b",), device, capture(None)) is None
    assert graphs.graph_for(("c",), device, capture(abs)) is None  # past the bound: eager, not captured
    assert graphs.graph_for(("a",), device, capture(abs)) is len  # captured once, replayed after
    assert graphs.graph_for(("b",), device, capture(abs)) is None  # a failure is not retried
    assert calls == [len, None] and graphs.captured == 1 and graphs.memory_bytes == 64
    assert graphs.failures == ["RuntimeError: operation not permitted when stream is capturing"]


# --- on a GPU ----------------------------------------------------------------------------------


def batches(store, count: int = 3):
    model = builtin_workload("ds2-mini").model
    pipeline = BatchPipeline(FeatureStore(store), ("train",), 8, model=model, seed=0, pad_to_frames=600)
    return [batch for batch, _ in zip(pipeline.epoch(0), range(count))]


def trained(ctx: BuildContext, data) -> tuple[list[float], dict, dict, GraphedNetwork | None]:
    """The losses of training on ``data``, the weights before and after, and the backend's graphs."""
    backend = torch_backend.TorchBackend()
    backend.build(ctx)
    try:
        start = backend.export_weights()
        losses = [backend.train_step(batch) for batch in data]
        return losses, start, backend.export_weights(), backend.graphs
    finally:
        backend.close()


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(("workload", "precision"), [("ds2-mini", "fp32"), ("ds2-mini", "bf16"),
                                                     ("conformer-mini", "fp32"), ("conformer-mini", "bf16")])
def test_a_graphed_step_trains_as_the_eager_step(workload, precision, small_store, conformer_store):
    """Dropout off, the same weights and batches: the first loss is the same computation, the
    weights after three steps moved alike, and BatchNorm's running statistics hold no trace of
    the capture's warm-up passes (three extra updates would move them by far more)."""
    store = small_store if workload == "ds2-mini" else conformer_store
    data = batches(store)
    eager = trained(context(workload, dataclasses.replace(CUDA, cuda_graphs=False), precision), data)
    graphed = trained(context(workload, CUDA, precision), data)
    assert eager[3] is None and graphed[3] is not None
    assert graphed[3].captured == 1 and not graphed[3].failures, graphed[3].failures
    first_eager, first_graphed = eager[0][0], graphed[0][0]
    # One forward, two kernel schedules: its longest sums are over frames x features (BatchNorm's
    # statistics), accumulated in float32 (under bf16 both runs round the same inputs to bf16 alike).
    terms = 600 * 8 * 96
    assert abs(first_graphed - first_eager) <= BOTH_SIDES * accumulation_bound(terms) * abs(first_eager)
    start, after_eager, after_graphed = eager[1], eager[2], graphed[2]
    # GPU reductions (atomics in BatchNorm's and CTC's backward) differ from run to run, and AdamW
    # turns a gradient that is rounding noise (an attention key's bias, which softmax ignores) into
    # a full step: the two runs may part by a share of how far three steps moved the weights. The
    # error model allows the first loss's bound compounded over the later steps (``after_steps``:
    # 0.27 here); 5% is tighter, and held for both families and precisions on an H200.
    moved = np.sqrt(sum(float(np.sum((after_eager[name] - start[name]) ** 2)) for name in start))
    apart = np.sqrt(sum(float(np.sum((after_graphed[name] - after_eager[name]) ** 2)) for name in start))
    assert apart <= 0.05 * moved, (apart, moved)


@pytest.mark.gpu
@needs_gpu
def test_shapes_beyond_the_bound_run_eagerly(small_store):
    network = torch.nn.Sequential(torch.nn.Linear(96, 16), torch.nn.BatchNorm1d(16)).cuda()
    graphed = GraphedNetwork(network, max_graphs=1)
    first, second = torch.randn(8, 96, device="cuda"), torch.randn(4, 96, device="cuda")
    before = network[1].running_mean.clone()
    graphed(first).sum().backward()
    assert graphed.captured == 1
    # The capture's warm-up passes left no trace: one update of the running mean, the replay's.
    expected = 0.9 * before + 0.1 * network[0](first).detach().mean(0)
    assert torch.allclose(network[1].running_mean, expected, atol=1e-5)
    graphed(second).sum().backward()  # a second signature: over the bound, eager
    assert graphed.captured == 1 and len(graphed._graphs) == 1
