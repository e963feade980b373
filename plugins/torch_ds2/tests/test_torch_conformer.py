"""The torch backend's Conformer family against benchbase's float64 NumPy reference
(benchbase.families.conformer), on the same weights, within the error model's float32 bounds; its
neutral weight layout, its masks and its BatchNorm over the valid frames only, on tiny models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numerics import half_outputs_against_bounds

from benchbase.backend import Batch, BuildContext, DevicePlan
from benchbase.errors import BenchbaseError
from benchbase.families.conformer.parts import PARTS
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF, INJECTION_DRAWS
from benchbase.specs.optimizer import AdamWSpec

torch_backend = pytest.importorskip("benchbase_torch_ds2.backend")
from benchbase_torch_ds2.backend import FAMILIES  # noqa: E402
from benchbase_torch_ds2.conformer import FAMILY  # noqa: E402
from benchbase_torch_ds2.conformer.model import Conformer, sinusoids  # noqa: E402
from benchbase_torch_ds2.conformer.weights import export_weights, import_weights  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

FEATURES = 13
TINY = ConformerModelSpec(symbols=30, encoder_dim=16, attention_heads=2, encoder_layers=2, feed_forward_expansion=2,
                          conv_kernel_size=5, subsampling_layers=2, dropout=0.0)
SUBSAMPLINGS = [TINY.model_copy(update={"subsampling_layers": layers}) for layers in (1, 2)]
ADAMW = AdamWSpec(learning_rate=3e-3, warmup_steps=2, hold_steps=1, decay_every_steps=1, decay_factor=0.5,
                  weight_decay=1e-3, gradient_clip_norm=1.0)
CPU = DevicePlan(kind="cpu", count=1, batch_per_device=4, threads=1)


def build(model=TINY, seed=0):
    backend = torch_backend.TorchBackend()
    backend.build(BuildContext(model=model, optimizer=ADAMW, feature_dimension=FEATURES, plan=CPU, seed=seed,
                               max_frames=600, max_label_length=100))
    return backend


def random_batch(model=TINY, seed=0, frames=57, lengths=(57, 40, 23, 9), labels=(5, 3, 4, 6)):
    """Right-padded random features; the last row's 6 labels have too few output frames (an impossible alignment)."""
    rng = np.random.default_rng(seed)
    feature_lengths = np.array(lengths, dtype=np.int32)
    label_lengths = np.array(labels, dtype=np.int32)
    features = rng.normal(size=(len(lengths), frames, FEATURES)).astype(np.float32)
    features[np.arange(frames)[None, :] >= feature_lengths[:, None]] = 0.0
    values = rng.integers(1, model.symbols, (len(lengths), max(labels))).astype(np.int32)
    values[np.arange(max(labels))[None, :] >= label_lengths[:, None]] = model.blank_index
    return Batch(features=features, feature_lengths=feature_lengths,
                 output_lengths=model.output_frames(feature_lengths), labels=values, label_lengths=label_lengths,
                 utterance_ids=tuple(f"u{i}" for i in range(len(lengths))), transcripts=("",) * len(lengths))


def network_on(weights, model=TINY):
    network = Conformer(model, FEATURES)
    import_weights(network, weights)
    return network.eval()


def predicted(network, features, lengths):
    with torch.inference_mode():
        return FAMILY.predict(network, torch.from_numpy(features), torch.from_numpy(lengths)).double().numpy()


# --- discovery, size, layout ---------------------------------------------------------------------


def test_the_folder_is_the_family_with_the_autocast_precisions():
    assert FAMILIES.named("conformer") is FAMILY
    assert FAMILY.precisions == {"fp32", "tf32", "bf16", "fp16"}
    assert "conformer" in torch_backend.TorchBackend.capabilities.families


def test_weights_go_in_and_come_back_exactly_each_in_its_torch_layout():
    weights = PARTS.random_weights(TINY, FEATURES, seed=1)
    network = network_on(weights)
    exported = export_weights(network)
    assert all(np.array_equal(exported[name], weights[name]) for name in weights)
    # Spot the conversions: (in, out) kernels, (time, frequency, in, out) and (width, channels).
    assert np.array_equal(network.blocks[1].attention.qkv.weight.detach().numpy(),
                          weights["blocks.1.attention.qkv.kernel"].T)
    conv = network.subsampling.convs[1].weight.detach().numpy()  # (out, in, time, frequency)
    assert conv[3, 5, 2, 0] == weights["subsampling.1.kernel"][2, 0, 5, 3]
    depthwise = network.blocks[0].conv.depthwise.weight.detach().numpy()  # (channels, 1, width)
    assert depthwise[7, 0, 4] == weights["blocks.0.conv.depthwise.kernel"][4, 7]
    assert np.array_equal(network.blocks[0].conv.batchnorm.variance.numpy(),
                          weights["blocks.0.conv.batchnorm.variance"])


def test_init_is_xavier_uniform_with_the_specs_fans_and_zero_vectors():
    torch.manual_seed(0)
    model = ConformerModelSpec(symbols=30, encoder_dim=64, attention_heads=4, encoder_layers=1,
                               conv_kernel_size=31, subsampling_layers=2)
    weights = export_weights(Conformer(model, 40))
    fans = {"subsampling.0.kernel": (9, 9 * 64), "subsampling.1.kernel": (9 * 64, 9 * 64),
            "blocks.0.ff1.inner.kernel": (64, 256), "blocks.0.conv.depthwise.kernel": (31, 31)}
    for name, (fan_in, fan_out) in fans.items():
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        values = weights[name]
        assert np.abs(values).max() <= limit and np.abs(values).max() > 0.95 * limit, name
        assert values.std() == pytest.approx(limit / np.sqrt(3.0), rel=0.1), name  # uniform, not a narrower law
    vectors = [name for name in weights if not name.endswith((".kernel", ".variance"))]
    assert vectors and all(not weights[name].any() for name in vectors)
    assert all((weights[name] == 1).all() for name in weights if name.endswith(".variance"))


# --- the forward pass and the first step against the reference ------------------------------------


@pytest.mark.parametrize("model", [TINY], ids=["2-subsampling"])  # one: the kit's forward_parity rule
def test_predict_equals_the_reference_within_its_rounding_bound(model):
    """Random running statistics, scales and query scales, so that no part hides behind its init;
    frames enough (121) that the float32 sinusoids' rounding shows if it exceeds the bound."""
    weights = PARTS.random_weights(model, FEATURES, seed=2)
    batch = random_batch(model, frames=121, lengths=(121, 64, 23, 9))
    found = predicted(network_on(weights, model), batch.features, batch.feature_lengths)
    exact, bound = PARTS.bounded_outputs(weights, model, batch.features, batch.feature_lengths,
                                         operand_roundoff=0.0, draws=INJECTION_DRAWS)
    assert found.shape == exact.shape == (4, model.output_frames(121), model.symbols)
    valid = np.arange(found.shape[1])[None, :] < batch.output_lengths[:, None]
    assert np.all(np.abs(found - exact)[valid] <= bound[valid])


def test_the_sinusoids_are_the_references_positions_to_float32_rounding_of_the_angle():
    """AlgoPerf's float32 ramp: w_k is exp of a rounded float32 product, so the angle p * w_k is
    off by a few units of roundoff relative to itself (measured: under 5 at 2000 frames); the
    reference's positions are float64."""
    from benchbase.families.conformer.reference import positions

    found = sinusoids(500, 16, TINY.max_timescale, torch.device("cpu")).double().numpy()
    angles = np.arange(500)[:, None] * np.exp(np.arange(8) * -(np.log(TINY.max_timescale) / 7))[None, :]
    bound = 8 * FLOAT32_UNIT_ROUNDOFF * (1 + np.tile(angles, 2))
    assert np.all(np.abs(found - positions(500, 16, TINY.max_timescale)) <= bound)


@pytest.mark.parametrize("model", SUBSAMPLINGS, ids=["1-subsampling", "2-subsampling"])
def test_an_utterances_outputs_do_not_depend_on_the_padding_of_its_batch(model):
    weights = PARTS.random_weights(model, FEATURES, seed=3)
    network = network_on(weights, model)
    batch = random_batch(model, frames=57)
    together = predicted(network, batch.features, batch.feature_lengths)
    for row, length in enumerate(batch.feature_lengths):
        alone = predicted(network, batch.features[row : row + 1, :length], batch.feature_lengths[row : row + 1])
        frames = batch.output_lengths[row]
        assert alone.shape[1] == frames
        scale = np.abs(alone[0]).max()
        assert np.abs(together[row, :frames] - alone[0]).max() <= 64 * FLOAT32_UNIT_ROUNDOFF * scale, row


@pytest.mark.parametrize("switch", [("SelfAttention", "KERNEL", "sdpa-additive"), ("SelfAttention", "KERNEL", "math"),
                                    ("FeedForward", "MASK_PADDING", False),
                                    ("Subsampling", "ZERO_OUTPUT_PADDING", True),
                                    ("Subsampling", "RELU_IN_PLACE", False)],
                         ids=lambda switch: f"{switch[1]}={switch[2]}")
def test_a_cpu_lever_switched_changes_no_valid_frame_beyond_float32_rounding(switch, monkeypatch):
    """Each switch of model.py's levers computes the same valid frames as the default model."""
    from benchbase_torch_ds2.conformer import model as conformer_model

    weights = PARTS.random_weights(SUBSAMPLINGS[0], FEATURES, seed=4)
    batch = random_batch(SUBSAMPLINGS[0], frames=57)
    default = predicted(network_on(weights, SUBSAMPLINGS[0]), batch.features, batch.feature_lengths)
    monkeypatch.setattr(getattr(conformer_model, switch[0]), switch[1], switch[2])
    switched = predicted(network_on(weights, SUBSAMPLINGS[0]), batch.features, batch.feature_lengths)
    for row, frames in enumerate(batch.output_lengths):
        scale = np.abs(default[row, :frames]).max()
        assert np.abs(switched[row, :frames] - default[row, :frames]).max() <= 64 * FLOAT32_UNIT_ROUNDOFF * scale


def test_the_batchnorm_statistics_are_those_of_the_valid_frames_computed_by_hand():
    """The running statistics after one step, against the mean and biased variance in float64 of
    the very tensor the BatchNorm received (a forward hook), over the valid frames only."""
    model = TINY.model_copy(update={"batchnorm_momentum": 0.25})
    batch = random_batch(model, frames=57)
    backend = build(model, seed=5)
    seen = []
    norm = backend.network.blocks[1].conv.batchnorm
    handle = norm.register_forward_hook(lambda module, inputs, output: seen.append(inputs))
    try:
        backend.train_step(batch)
    finally:
        handle.remove()
        backend.close()
    (x, padded), = seen
    values = x.detach().double().numpy()[~padded[..., 0].numpy()]  # (valid frames, channels)
    assert len(values) == batch.output_lengths.sum()
    mean, variance = values.mean(axis=0), values.var(axis=0)
    tolerance = 1e-5 * (1 + np.abs(values).max())
    assert np.abs(norm.mean.numpy() - 0.75 * mean).max() <= tolerance
    assert np.abs(norm.variance.numpy() - (0.25 + 0.75 * variance)).max() <= tolerance
    every_frame = x.detach().double().numpy().reshape(-1, model.encoder_dim)
    assert np.abs(every_frame.mean(axis=0) - mean).max() > 100 * tolerance  # the padding would have shown


@pytest.mark.filterwarnings("ignore:torch.distributed.nn.functional.all_reduce is deprecated")
def test_the_synchronized_batchnorm_of_one_process_is_the_local_one(tmp_path):
    """The global batch's statistics from all-reduced sums equal the two-pass local ones."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(6)
        local, synchronized = (Conformer(TINY, FEATURES, synchronized=flag) for flag in (False, True))
        synchronized.load_state_dict(local.state_dict())
        batch = random_batch()
        losses = [network(torch.from_numpy(batch.features), torch.from_numpy(batch.feature_lengths)).sum()
                  for network in (local, synchronized)]
        for loss in losses:
            loss.backward()
    finally:
        torch.distributed.destroy_process_group()
    for (name, value), other in zip(local.state_dict().items(), synchronized.state_dict().values()):
        assert torch.allclose(value, other, rtol=1e-5, atol=1e-6), name
    for (name, value), other in zip(local.named_parameters(), synchronized.parameters()):
        assert (value.grad - other.grad).abs().max() <= 1e-5 * value.grad.abs().max(), name


# --- precisions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_mixed_precision_predicts_near_the_reference_and_trains(precision):
    """The backend's predict() in bf16 or fp16 returns float32 log-probabilities visibly not
    float32's (beyond its bound) and within the half precision's rounding bound of the float64
    reference's (both sides, ``numerics``); a training step is finite. The harness refuses fp16 on
    a CPU (it measures nothing there); built directly, it runs with its loss scaling."""
    weights = PARTS.random_weights(TINY, FEATURES, seed=7)
    batch = random_batch()
    backend = build(TINY.model_copy(update={"precision": precision}))
    try:
        backend.import_weights(weights)
        found = backend.predict(batch.inputs())
        loss = backend.train_step(batch)
    finally:
        backend.close()
    assert found.dtype == np.float32 and np.isfinite(loss)
    float32_bound, difference, half_bound = half_outputs_against_bounds(weights, TINY, batch.inputs(), found, precision)
    assert float32_bound < difference <= half_bound


def test_int8_emulated_is_refused():
    with pytest.raises((BenchbaseError, ValueError)):
        build(TINY.model_copy(update={"precision": "int8-emulated"}))
