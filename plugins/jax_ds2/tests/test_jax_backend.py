"""The JAX backend on real batches, beyond the conformance kit's rules (its own tests run those:
test_jax_conformance.py): initialization, training, checkpoints, the optimizer, the recurrence.

Every build compiles its programs (seconds on two cores), so each test builds as few
backends as it can and reuses one batch shape.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax_backend = pytest.importorskip("benchbase_jax_ds2.backend")
jnp = jax.numpy

from benchbase_jax_ds2.dropout import counter_hash  # noqa: E402
from benchbase_jax_ds2.optimizers import make_optimizer  # noqa: E402
from benchbase_jax_ds2.recurrence import recurrence  # noqa: E402

from benchbase.backend import BackendReference, BuildContext, DevicePlan  # noqa: E402
from benchbase.data.pipeline import BatchPipeline  # noqa: E402
from benchbase.data.store import FeatureStore  # noqa: E402
from benchbase.errors import BenchbaseError  # noqa: E402
from benchbase.families.ds2.weight_layout import weight_layout  # noqa: E402
from benchbase.numerics.tolerances import (  # noqa: E402
    BOTH_SIDES,
    FLOAT32_UNIT_ROUNDOFF,
    accumulation_bound,
    same_kernels,
)
from benchbase.plugin_host import get_plugin_manager  # noqa: E402
from benchbase.plugin_host.builtins.workloads import builtin_workload  # noqa: E402
from benchbase.plugin_host.registry import collect_registry  # noqa: E402
from benchbase.specs import AdaDeltaSpec  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

WORKLOAD = builtin_workload("ds2-mini")
MODEL = WORKLOAD.model
FEATURES = 93
CPU = DevicePlan(kind="cpu", count=1, batch_per_device=8, threads=1)


def build(model=MODEL, seed=0, optimizer=None):
    backend = jax_backend.JaxBackend()
    backend.build(BuildContext(model=model, optimizer=optimizer or WORKLOAD.optimizer, feature_dimension=FEATURES,
                               plan=CPU, seed=seed, max_frames=2000, max_label_length=400))
    return backend


@pytest.fixture
def backend():
    built = build()
    yield built
    built.close()


@pytest.fixture(scope="module")
def batch(small_store):
    epoch = BatchPipeline(FeatureStore(small_store), ("train",), 8, model=MODEL, seed=0).epoch(0)
    first = next(iter(epoch))
    epoch.close()
    return first


def test_the_entry_point_registers_a_lazy_reference():
    reference = collect_registry(get_plugin_manager()).backends["jax"]
    assert isinstance(reference, BackendReference)
    assert reference.load() is jax_backend.JaxBackend
    capabilities = jax_backend.JaxBackend.capabilities
    assert capabilities.devices == {"cpu", "cuda"} and capabilities.max_devices == 1


def test_weights_follow_the_layout_and_the_pinned_initialization(backend):
    assert backend.parameter_count() == MODEL.parameter_count(FEATURES)
    weights = backend.export_weights()
    layout = weight_layout(MODEL, FEATURES)
    assert list(weights) == list(layout)
    assert all(weights[name].shape == shape and weights[name].dtype == np.float32 for name, shape in layout.items())
    units = MODEL.lstm_units
    bias = weights["lstm.0.bias"]
    assert (bias[units : 2 * units] == MODEL.lstm_forget_bias).all()
    assert (np.delete(bias, np.s_[units:2 * units]) == 0).all()
    assert (weights["conv_norm.variance"] == 1).all() and (weights["lstm_norm.1.mean"] == 0).all()
    limit = np.sqrt(6 / (MODEL.conv_width * FEATURES + MODEL.conv_width * MODEL.conv_channels))
    assert np.abs(weights["conv.kernel"]).max() <= limit and np.abs(weights["conv.kernel"]).max() > 0.9 * limit
    limit = np.sqrt(6 / (units + 4 * units))
    assert limit * 0.9 < np.abs(weights["lstm.1.recurrent_kernel"]).max() <= limit


def test_training_lowers_the_loss_and_a_checkpoint_continues_exactly(batch, tmp_path):
    backend = build()
    restored = build(seed=99)
    try:
        losses = [backend.train_step(batch) for _ in range(15)]
        assert all(np.isfinite(losses)) and losses[-1] < 0.8 * losses[0]
        backend.save_checkpoint(tmp_path / "ckpt")
        restored.load_checkpoint(tmp_path / "ckpt")
        np.testing.assert_array_equal(restored.predict(batch.inputs()), backend.predict(batch.inputs()))
        expected = backend.train_step(batch)
        assert abs(restored.train_step(batch) - expected) <= same_kernels(expected)
    finally:
        backend.close()
        restored.close()


def test_a_checkpoint_that_does_not_fit_is_refused_with_its_path(backend, tmp_path):
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(BenchbaseError, match="garbage.ckpt"):
        backend.load_checkpoint(garbage)
    backend.save_checkpoint(tmp_path / "good.ckpt")
    with np.load(tmp_path / "good.ckpt") as archive:
        arrays = {name: archive[name] for name in archive.files}
    name = next(name for name in arrays if "conv.kernel" in name)
    arrays[name] = arrays[name][:, :10]
    with open(tmp_path / "other-model.ckpt", "wb") as handle:
        np.savez(handle, **arrays)
    with pytest.raises(BenchbaseError, match="other-model.ckpt.*conv.kernel"):
        backend.load_checkpoint(tmp_path / "other-model.ckpt")


@pytest.mark.parametrize("clip", [None, 0.5])
def test_adadelta_is_pytorchs(clip):
    spec = AdaDeltaSpec(learning_rate=0.7, rho=0.9, epsilon=1e-6, gradient_clip_norm=clip)
    optimizer = make_optimizer(spec)
    rng = np.random.default_rng(0)
    parameters = {"w": rng.normal(size=5).astype(np.float32)}
    state = optimizer.init(parameters)
    expected, square, accumulated = parameters["w"].astype(np.float64), np.zeros(5), np.zeros(5)
    for _ in range(4):
        gradient = rng.normal(size=5).astype(np.float32)
        updates, state = optimizer.update({"w": gradient}, state, parameters)
        parameters = {"w": np.asarray(parameters["w"] + updates["w"])}
        if clip is not None:
            gradient = gradient * min(1.0, clip / np.linalg.norm(gradient))
        square = spec.rho * square + (1 - spec.rho) * gradient**2
        delta = np.sqrt(accumulated + spec.epsilon) / np.sqrt(square + spec.epsilon) * gradient
        accumulated = spec.rho * accumulated + (1 - spec.rho) * delta**2
        expected = expected - spec.learning_rate * delta
    # float32 against float64: each of the 4 updates takes about ten roundings of the weight's
    # magnitude (the accumulators, two square roots, a quotient, the step), and AdaDelta's
    # update does not amplify the earlier ones (tolerances, rule 6): 4 x 10 roundings.
    allowed = 4 * 10 * FLOAT32_UNIT_ROUNDOFF * np.abs(expected)
    assert (np.abs(parameters["w"] - expected) <= allowed).all(), np.abs(parameters["w"] - expected) / allowed


@pytest.mark.parametrize("layout", ["nwc", "ncw", "matmul"])
def test_each_way_of_computing_the_convolution_is_the_convolution(monkeypatch, layout):
    """Every ``CONVOLUTION`` against the float64 convolution, within the float32 bound of its sums
    (width x features terms each), on an input one frame past whole windows."""
    from benchbase_jax_ds2.arithmetic import arithmetic
    from benchbase_jax_ds2.ds2 import model as ds2_model

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 40, FEATURES)).astype(np.float32)
    kernel = rng.normal(size=(MODEL.conv_width, FEATURES, MODEL.conv_channels)).astype(np.float32)
    frames = MODEL.output_frames(40)
    windows = np.stack([x[:, t * MODEL.conv_stride : t * MODEL.conv_stride + MODEL.conv_width].reshape(2, -1)
                        for t in range(frames)], axis=1).astype(np.float64)
    flat = kernel.reshape(-1, MODEL.conv_channels).astype(np.float64)
    monkeypatch.setattr(ds2_model, "CONVOLUTION", layout)
    found = np.asarray(ds2_model._convolution(MODEL, jnp.asarray(x), jnp.asarray(kernel), arithmetic(MODEL)))
    assert found.shape == (2, frames, MODEL.conv_channels)
    allowed = accumulation_bound(flat.shape[0]) * (np.abs(windows) @ np.abs(flat))
    assert (np.abs(found - windows @ flat) <= allowed).all()


@pytest.mark.parametrize("unroll", [1, 4])
def test_the_lstms_hand_written_gradient_equals_autodiffs(monkeypatch, unroll):
    from benchbase_jax_ds2 import recurrence as recurrence_module

    monkeypatch.setattr(recurrence_module, "SCAN_UNROLL", unroll)  # 4: 9 frames are no whole number of 4
    def differentiated_scan(inputs, kernel):
        def step(carry, z):
            h, c = carry
            i, f, g, o = jnp.split(z + h @ kernel, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((inputs.shape[1], kernel.shape[0]))
        return jax.lax.scan(step, (zeros, zeros), inputs)[1]

    rng = np.random.default_rng(0)
    inputs, kernel = rng.normal(size=(9, 3, 20)).astype(np.float32), rng.normal(0, 0.5, (5, 20)).astype(np.float32)
    weights = rng.normal(size=(9, 3, 5)).astype(np.float32)
    with jax.default_matmul_precision("highest"):
        found, expected = (jax.grad(lambda x, w, fn=fn: jnp.sum(fn(x, w) * weights), argnums=(0, 1))(inputs, kernel)
                           for fn in (recurrence, differentiated_scan))
    # The same float32 gradient by two orders of the same sums: the longest is over the 9 steps
    # and the 4 x 5 gates (or the 3 rows), of terms no larger than the gradients' magnitude.
    for a, b in zip(found, expected, strict=True):
        terms = inputs.shape[0] * kernel.shape[1]
        allowed = BOTH_SIDES * accumulation_bound(terms) * np.abs(b).max()
        assert np.abs(a - b).max() <= allowed, (np.abs(a - b).max(), allowed)


def test_dropout_keeps_each_element_with_the_spec_probability():
    keys = jax.random.key_data(jax.random.split(jax.random.key(0, impl="rbg"), 2))
    threshold = np.uint32(round(0.95 * 2**32))
    first, second = (np.asarray(counter_hash((1000, 1000), key)) < threshold for key in keys)
    assert abs(first.mean() - 0.95) < 0.002 and abs(second.mean() - 0.95) < 0.002
    assert abs((first & second).mean() - 0.95**2) < 0.002  # independent across keys


class _FakeGpu:
    """What the harness and build() read of a jax.Device."""

    platform, device_kind = "gpu", "NVIDIA H200"

    def __init__(self, number: int) -> None:
        self.id = number


@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_visible_devices_counts_jaxs_gpus(monkeypatch, gpus):
    """A CUDA plan is asked of JAX's own device list (which honours CUDA_VISIBLE_DEVICES), so the
    harness no longer refuses a JAX run on a GPU as "sees 0"; faked here, on a CPU-only JAX."""
    from benchbase.harness.devices import check_visible_devices
    from benchbase.specs import HardwareProfile

    real = jax.devices

    def devices(backend=None):
        if backend in ("cuda", "gpu"):
            if not gpus:
                raise RuntimeError("Unknown backend cuda")  # what a CPU-only JAX raises
            return [_FakeGpu(number) for number in range(gpus)]
        return real(backend)

    monkeypatch.setattr(jax, "devices", devices)
    backend = jax_backend.JaxBackend
    assert backend.visible_devices("cuda") == gpus
    assert backend.visible_devices("cpu") is None
    hardware = HardwareProfile.model_validate({
        "name": "one-gpu", "description": "one GPU",
        "devices": {"kind": "gpu", "count": 1, "model": "NVIDIA H200"},
        "cpu": {"model": "host", "cores": 16, "threads": 16, "ram_gb": 128},
        "pipeline": {"global_batch": 8, "batch_per_device": 8, "readers": 1, "buffer": 1}})
    plan = DevicePlan(kind="cuda", count=1, batch_per_device=8)
    from benchbase.harness.world import World

    if gpus:
        check_visible_devices(backend, "jax", hardware, plan, World())
    else:
        with pytest.raises(BenchbaseError, match="backend 'jax' sees 0 here"):
            check_visible_devices(backend, "jax", hardware, plan, World())


def test_a_gpu_profile_without_a_gpu_says_so():
    if any(device.platform == "gpu" for device in jax.devices()):
        pytest.skip("this machine has a GPU")
    with pytest.raises(BenchbaseError, match="sees no GPU"):
        jax_backend.JaxBackend().build(BuildContext(
            model=MODEL, optimizer=WORKLOAD.optimizer, feature_dimension=FEATURES,
            plan=DevicePlan(kind="cuda", count=1, batch_per_device=8), seed=0, max_frames=2000, max_label_length=400))
