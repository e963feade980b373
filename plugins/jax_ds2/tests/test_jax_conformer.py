"""The JAX backend's Conformer family against benchbase's float64 NumPy reference
(benchbase.families.conformer), on the same weights, within the error model's float32 bounds; its
neutral weight layout, its masks (the backend's own padding of rows and frames included) and its
BatchNorm over the valid frames only, on tiny models.

Every build compiles its programs (seconds on two cores), so the tests share one backend where
they can and reuse few batch shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
from numerics import half_outputs_against_bounds

from benchbase.backend import Batch, BuildContext, DevicePlan
from benchbase.errors import BenchbaseError
from benchbase.families.conformer.parts import PARTS
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF, INJECTION_DRAWS
from benchbase.specs.optimizer import AdamWSpec

jax = pytest.importorskip("jax")
jax_backend = pytest.importorskip("benchbase_jax_ds2.backend")
jnp = jax.numpy

from benchbase_jax_ds2.arithmetic import arithmetic  # noqa: E402
from benchbase_jax_ds2.backend import FAMILIES  # noqa: E402
from benchbase_jax_ds2.conformer import FAMILY  # noqa: E402
from benchbase_jax_ds2.conformer.model import forward, initial_weights  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

FEATURES = 13  # the small store's MFCCs
TINY = ConformerModelSpec(symbols=30, encoder_dim=16, attention_heads=2, encoder_layers=2, feed_forward_expansion=2,
                          conv_kernel_size=5, subsampling_layers=2, dropout=0.0)
ADAMW = AdamWSpec(learning_rate=3e-3, warmup_steps=2, hold_steps=1, decay_every_steps=1, decay_factor=0.5,
                  weight_decay=1e-3, gradient_clip_norm=1.0)
CPU = DevicePlan(kind="cpu", count=1, batch_per_device=6, threads=1)
"""Six rows: a batch of four gets two rows of the backend's own, which no statistic and no loss may see."""


def build(model=TINY, seed=0):
    backend = jax_backend.JaxBackend()
    backend.build(BuildContext(model=model, optimizer=ADAMW, feature_dimension=FEATURES, plan=CPU, seed=seed,
                               max_frames=600, max_label_length=100))
    return backend


def random_batch(model=TINY, seed=0, frames=57, lengths=(57, 40, 23, 9), labels=(5, 3, 4, 6)):
    """Right-padded random features; the last row's 6 labels have too few output frames at two
    subsampling layers (an impossible alignment)."""
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


def valid_frames(batch):
    frames = int(TINY.output_frames(batch.features.shape[1]))
    return np.arange(frames)[None, :] < batch.output_lengths[:, None]


@pytest.fixture(scope="module")
def backend():
    """One fp32 backend of TINY for the tests that only import weights and predict."""
    built = build()
    yield built
    built.close()


# --- discovery, size, layout ---------------------------------------------------------------------


def test_the_folder_is_the_family_with_fp32_tf32_bf16_and_fp16():
    assert FAMILIES.named("conformer") is FAMILY
    assert FAMILY.precisions == {"fp32", "tf32", "bf16", "fp16"}
    capabilities = jax_backend.JaxBackend.capabilities
    assert "conformer" in capabilities.families
    assert capabilities.precisions_of("conformer") == {"fp32", "tf32", "bf16", "fp16"}


def test_int8_emulated_is_refused():
    with pytest.raises(BenchbaseError, match="trains conformer in bf16 or fp16 or fp32 or tf32 only"):
        build(TINY.model_copy(update={"precision": "int8-emulated"}))


def test_init_is_xavier_uniform_with_the_specs_fans_and_zero_vectors():
    model = ConformerModelSpec(symbols=30, encoder_dim=64, attention_heads=4, encoder_layers=1,
                               conv_kernel_size=31, subsampling_layers=2)
    weights = initial_weights(model, 40, seed=0)
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
    assert not np.array_equal(weights["blocks.0.ff1.inner.kernel"], initial_weights(model, 40, 1)[
        "blocks.0.ff1.inner.kernel"])  # the seed draws them


# --- the forward pass and the first step against the reference ------------------------------------


def test_predict_equals_the_reference_within_its_rounding_bound(backend):
    """Random running statistics, scales and query scales, so that no part hides behind its init;
    121 frames (the backend pads to 128) and four rows (it pads to six)."""
    weights = PARTS.random_weights(TINY, FEATURES, seed=2)
    batch = random_batch(frames=121, lengths=(121, 64, 23, 9))
    backend.import_weights(weights)
    found = backend.predict(batch.inputs())
    exact, bound = PARTS.bounded_outputs(weights, TINY, batch.features, batch.feature_lengths,
                                         operand_roundoff=0.0, draws=INJECTION_DRAWS)
    assert found.dtype == np.float32 and found.shape == exact.shape == (4, TINY.output_frames(121), TINY.symbols)
    valid = valid_frames(batch)
    assert np.all(np.abs(found - exact)[valid] <= bound[valid])


def test_an_utterances_outputs_do_not_depend_on_the_padding_of_its_batch(backend):
    """Each row alone (its own frame bucket, five rows of the backend's padding) against the same
    row in the batch of four: attention, convolutions and BatchNorm read no padded frame. The
    lengths are padded to the bucket's rows, so predict() compiles once per padded features
    shape (here 128 and 64 frames), not once per caller's batch size."""
    backend.import_weights(PARTS.random_weights(TINY, FEATURES, seed=4))
    batch = random_batch(frames=121, lengths=(121, 64, 23, 9))
    together = backend.predict(batch.inputs())
    for row, length in enumerate(batch.feature_lengths):
        alone = backend.predict(Batch(features=batch.features[row : row + 1, :length].copy(),
                                      feature_lengths=batch.feature_lengths[row : row + 1],
                                      output_lengths=batch.output_lengths[row : row + 1], labels=batch.labels[:1],
                                      label_lengths=batch.label_lengths[:1], utterance_ids=("",),
                                      transcripts=("",)).inputs())
        frames = batch.output_lengths[row]
        assert alone.shape == (1, frames, TINY.symbols)
        scale = np.abs(alone[0]).max()
        assert np.abs(together[row, :frames] - alone[0]).max() <= 64 * FLOAT32_UNIT_ROUNDOFF * scale, row
    assert backend._predict._cache_size() == 2


def test_the_first_step_gives_the_references_loss_and_running_statistics():
    """From random weights, at momentum 0.5 (a batch statistic over the padded frames, the
    backend's padded rows, or an unbiased variance would move the running ones far outside their
    bounds), with an impossible alignment that must count zero."""
    model = TINY.model_copy(update={"batchnorm_momentum": 0.5})
    weights = PARTS.random_weights(model, FEATURES, seed=5)
    batch = random_batch(model, frames=57)
    backend = build(model)
    try:
        backend.import_weights(weights)
        loss = backend.train_step(batch)
        after = backend.export_weights()
    finally:
        backend.close()
    reference = PARTS.reference_step(weights, model, batch)
    assert np.isinf(reference.losses[-1]) and np.isfinite(reference.losses[:-1]).all()
    assert isinstance(loss, float) and abs(loss - reference.loss) <= reference.loss_bound
    for name, expected in reference.running.items():
        allowed = reference.running_bound[name] + 4 * FLOAT32_UNIT_ROUNDOFF * np.abs(expected)
        assert np.all(np.abs(after[name] - expected) <= allowed), name
        assert not np.array_equal(after[name], weights[name]), name  # the step moved them


def test_dropout_draws_from_the_states_key_and_is_off_in_predict():
    """Dropout changes the loss, the same seed draws the same masks, and predict() is unchanged."""
    model = TINY.model_copy(update={"dropout": 0.3, "subsampling_layers": 1})
    parameters = initial_weights(model, FEATURES, seed=6)
    statistics = {name: parameters.pop(name) for name in list(parameters) if name.endswith(("mean", "variance"))}
    batch = random_batch(model, frames=57)
    run = jax.jit(lambda key, training: forward(model, parameters, statistics, batch.features, batch.feature_lengths,
                                                arithmetic(model), training=training, dropout_key=key)[0],
                  static_argnums=1)
    keys = [jax.random.key(seed, impl="rbg") for seed in (0, 0, 1)]
    first, again, other = (np.asarray(run(key, True)) for key in keys)
    valid = np.arange(first.shape[1])[None, :] < batch.output_lengths[:, None]
    assert np.array_equal(first, again) and not np.allclose(first[valid], other[valid])
    assert np.array_equal(np.asarray(run(keys[0], False)), np.asarray(run(keys[2], False)))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_mixed_precision_predicts_near_the_reference_and_trains(precision):
    """float32 log-probabilities visibly not float32's (beyond its bound) and within the half
    precision's rounding bound of the float64 reference's (both sides, ``numerics``), and training
    steps that move the weights and BatchNorm's statistics. The harness refuses fp16 on a CPU (it
    measures nothing there); built directly, its step runs with the dynamic loss scale
    (``loss_scaling``)."""
    weights = PARTS.random_weights(TINY, FEATURES, seed=7)
    batch = random_batch()
    backend = build(TINY.model_copy(update={"precision": precision}))
    try:
        backend.import_weights(weights)
        found = backend.predict(batch.inputs())
        assert found.dtype == np.float32
        float32_bound, difference, half_bound = half_outputs_against_bounds(weights, TINY, batch.inputs(), found,
                                                                            precision)
        assert float32_bound < difference <= half_bound
        if precision == "fp16":
            assert float(backend._state.loss_scale["scale"]) == 2.0**15
            # This tiny model's output kernel has gradients near 4, which at 2**15 overflow float16
            # (its first steps would be skipped and the scale halved: loss_scaling's job); at 2**8
            # none does.
            backend._state = backend._state._replace(loss_scale={"scale": jnp.float32(2.0**8),
                                                                 "finite_steps": jnp.int32(0)})
        losses = [backend.train_step(random_batch(seed=step)) for step in range(2)]
        after = backend.export_weights()
        assert all(np.isfinite(losses))
        if precision == "fp16":
            assert int(backend._state.loss_scale["finite_steps"]) == 2  # neither step overflowed
        assert not np.array_equal(after["blocks.0.ff1.inner.kernel"], weights["blocks.0.ff1.inner.kernel"])
        assert not np.array_equal(after["blocks.0.conv.batchnorm.mean"], weights["blocks.0.conv.batchnorm.mean"])
    finally:
        backend.close()
