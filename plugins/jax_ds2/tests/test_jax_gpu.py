"""The JAX backend on a CUDA GPU (marked ``gpu``: `make test-gpu`; skipped where JAX sees none)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax_backend = pytest.importorskip("benchbase_jax_ds2.backend")

from benchbase.backend import BuildContext, DevicePlan  # noqa: E402
from benchbase.data.pipeline import BatchPipeline  # noqa: E402
from benchbase.data.store import FeatureStore  # noqa: E402
from benchbase.plugin_host.builtins.workloads import builtin_workload  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not jax_backend.JaxBackend.visible_devices("cuda"), reason="JAX sees no CUDA GPU")]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_training_step_on_the_gpu_agrees_with_the_cpu(small_store, precision):
    """The same weights and batch on the GPU and on the CPU: the first loss agrees (dropout off),
    within the precision's rounding of a sum over the batch's frames."""
    workload = builtin_workload("ds2-mini")
    model = workload.model.model_copy(update={"precision": precision, "dropout": 0.0})
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 8, model=model, seed=0).epoch(0)))
    losses, devices = {}, {}
    for kind in ("cuda", "cpu"):
        backend = jax_backend.JaxBackend()
        backend.build(BuildContext(model=model, optimizer=workload.optimizer,
                                   feature_dimension=workload.features.dimension,
                                   plan=DevicePlan(kind=kind, count=1, batch_per_device=8), seed=0,
                                   max_frames=2000, max_label_length=400))
        try:
            losses[kind], devices[kind] = backend.train_step(batch), backend.devices_in_use()
        finally:
            backend.close()
    assert devices["cuda"][0].startswith("cuda:") and np.isfinite(losses["cuda"])
    # bf16 rounds each product's inputs to 8 significant bits; float32 sums differ by order alone.
    relative = 2.0**-7 if precision == "bf16" else 1e-4
    assert abs(losses["cuda"] - losses["cpu"]) <= relative * abs(losses["cpu"]), losses
