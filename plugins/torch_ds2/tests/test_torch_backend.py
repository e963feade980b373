from __future__ import annotations

import numpy as np
import pytest
import torch
from numerics import assert_normalized

from benchbase.backend import BuildContext, DevicePlan
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.numerics.tolerances import BOTH_SIDES, FLOAT32_UNIT_ROUNDOFF, accumulation_bound, same_kernels
from benchbase.plugin_host.builtins.workloads import builtin_workload

torch_backend = pytest.importorskip("benchbase_torch_ds2.backend")

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

CPU = DevicePlan(kind="cpu", count=1, batch_per_device=8, threads=1)
MINI_MODEL = builtin_workload("ds2-mini").model


def build(workload, seed=0):
    backend = torch_backend.TorchBackend()
    backend.build(context(workload, CPU, seed))
    return backend


def context(workload, plan, seed=0):
    return BuildContext(model=workload.model, optimizer=workload.optimizer,
                        feature_dimension=workload.features.dimension, plan=plan, seed=seed, max_frames=2000,
                        max_label_length=400)



def test_close_lets_go_of_every_module(registry):
    """After close() nothing of the backend keeps the network alive (its strategy included): under
    DDP, a reducer that outlives close() is freed after the process group is destroyed, and can hang."""
    import gc
    import weakref

    backend = build(registry.workload("ds2-mini"))
    network = weakref.ref(backend.network)
    backend.close()
    gc.collect()
    assert network() is None, [type(r).__name__ for r in gc.get_referrers(network())]

@pytest.mark.parametrize("name", ["ds2-mini", "ds2"])
def test_parameter_count_equals_what_the_spec_implies(registry, name):
    workload = registry.workload(name)
    assert build(workload).parameter_count() == workload.model.parameter_count(workload.features.dimension)


def test_the_specs_pinned_values_reach_the_framework(registry):
    workload = registry.workload("ds2-mini")
    backend = build(workload)
    group = backend.optimizer.param_groups[0]
    assert (group["lr"], group["rho"], group["eps"]) == (1.0, 0.95, 1e-8)
    norm = backend.model.conv_norm
    assert norm.keep == workload.model.batchnorm_momentum and norm.eps == 1e-5
    bias = backend.model.lstms[0].bias_ih_l0.detach()
    units = workload.model.lstm_units
    assert (bias[units : 2 * units] == 1.0).all() and (bias[:units] == 0).all()
    assert not backend.model.lstms[0].bias_hh_l0.requires_grad


def test_training_lowers_the_loss_and_a_checkpoint_restores_predictions(registry, small_store, tmp_path):
    workload = registry.workload("ds2-mini")
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 8, model=MINI_MODEL, seed=0).epoch(0)))
    backend = build(workload)
    losses = [backend.train_step(batch) for _ in range(12)]
    assert losses[-1] < 0.8 * losses[0]
    log_probs = backend.predict(batch.inputs())
    assert log_probs.shape == (8, workload.model.output_frames(batch.features.shape[1]), 30)
    assert_normalized(log_probs)
    backend.save_checkpoint(tmp_path / "ckpt")
    restored = build(workload, seed=99)
    restored.load_checkpoint(tmp_path / "ckpt")
    assert np.abs(restored.predict(batch.inputs()) - log_probs).max() <= same_kernels(log_probs)


def test_batchnorm_folds_the_biased_variance_into_its_running_estimate(registry):
    workload = registry.workload("ds2-mini")
    norm = build(workload).model.conv_norm
    x = torch.randn(4, workload.model.conv_channels, 50) * 3 + 1
    norm(x)
    keep = workload.model.batchnorm_momentum
    variance, mean = (value.double() for value in torch.var_mean(x.double(), dim=(0, 2), correction=0))
    # Sums over the 200 values of a channel, relative to E[x^2] (also a variance computed as
    # E[x^2] - E[x]^2), then the update's roundings. The unbiased variance is 1/199 = 0.5 % larger.
    frames = x.shape[0] * x.shape[2]
    squares = (x.double() ** 2).mean(dim=(0, 2))
    variance_bound = BOTH_SIDES * accumulation_bound(frames) * (1 - keep) * squares + 4 * FLOAT32_UNIT_ROUNDOFF
    mean_bound = BOTH_SIDES * accumulation_bound(frames) * (1 - keep) * x.double().abs().mean(dim=(0, 2))
    assert ((norm.running_var.double() - (keep + (1 - keep) * variance)).abs() <= variance_bound).all()
    assert ((norm.running_mean.double() - (1 - keep) * mean).abs() <= mean_bound + FLOAT32_UNIT_ROUNDOFF).all()


def test_a_gpu_profile_without_cuda_says_so(registry):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from benchbase.errors import BenchbaseError

    workload = registry.workload("ds2-mini")
    with pytest.raises(BenchbaseError, match="sees no GPU; pass --device cpu"):
        torch_backend.TorchBackend().build(context(workload, DevicePlan(kind="cuda", count=1, batch_per_device=8)))


@pytest.mark.gpu
def test_cuda_training_step(registry, small_store):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    workload = registry.workload("ds2-mini")
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 8, model=MINI_MODEL, seed=0).epoch(0)))
    backend = torch_backend.TorchBackend()
    backend.build(context(workload, DevicePlan(kind="cuda", count=1, batch_per_device=8)))
    assert np.isfinite(backend.train_step(batch))


def test_host_arrays_are_numpys_on_a_cpu(registry):
    backend = build(registry.workload("ds2-mini"))
    try:
        assert backend.host_array((2, 3), np.dtype(np.float32)) is None
    finally:
        backend.close()


@pytest.mark.gpu
def test_on_a_gpu_host_arrays_are_page_locked(registry):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    backend = torch_backend.TorchBackend()
    backend.build(context(registry.workload("ds2-mini"), DevicePlan(kind="cuda", count=1, batch_per_device=8)))
    try:
        array = backend.host_array((8, 600, 96), np.dtype(np.float32))
        assert array.shape == (8, 600, 96) and array.dtype == np.float32 and torch.from_numpy(array).is_pinned()
        assert backend._tensor(array).device.type == "cuda"
    finally:
        backend.close()
