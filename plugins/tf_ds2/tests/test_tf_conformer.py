"""The TensorFlow backend's Conformer family against benchbase's float64 NumPy reference
(benchbase.families.conformer), on the same weights, within the error model's float32 bounds: its
neutral weight layout and init, its masks, its BatchNorm over the valid frames only (on one
replica and on two), on tiny models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
tf_backend = pytest.importorskip("benchbase_tf_ds2.backend")

import keras  # noqa: E402
from benchbase_tf_ds2.backend import FAMILIES  # noqa: E402
from benchbase_tf_ds2.conformer import FAMILY  # noqa: E402
from benchbase_tf_ds2.conformer.family import cpu_has_bfloat16_units  # noqa: E402
from benchbase_tf_ds2.conformer.model import Conformer, positions  # noqa: E402
from benchbase_tf_ds2.conformer.weights import neutral_variables  # noqa: E402

from benchbase.backend import Batch, BuildContext, DevicePlan  # noqa: E402
from benchbase.errors import BenchbaseError  # noqa: E402
from benchbase.families.conformer.parts import PARTS  # noqa: E402
from benchbase.families.conformer.reference import positions as reference_positions  # noqa: E402
from benchbase.families.conformer.spec import ConformerModelSpec  # noqa: E402
from benchbase.families.conformer.weight_layout import batchnorm_names  # noqa: E402
from benchbase.kit.step_rules import largest_statistic_excess  # noqa: E402
from benchbase.numerics.tolerances import BOTH_SIDES, FLOAT32_UNIT_ROUNDOFF, INJECTION_DRAWS  # noqa: E402
from benchbase.specs.optimizer import AdamWSpec  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

FEATURES = 13
TINY = ConformerModelSpec(symbols=30, encoder_dim=16, attention_heads=2, encoder_layers=2, feed_forward_expansion=2,
                          conv_kernel_size=5, subsampling_layers=2, dropout=0.0)
ADAMW = AdamWSpec(learning_rate=3e-3, warmup_steps=2, hold_steps=1, decay_every_steps=1, decay_factor=0.5,
                  weight_decay=1e-3, gradient_clip_norm=1.0)
REPLICAS = 2


def build(model=TINY, seed=0, replicas=1):
    backend = tf_backend.TensorFlowBackend()
    plan = DevicePlan(kind="cpu", count=replicas, batch_per_device=4 // replicas, threads=1)
    backend.build(BuildContext(model=model, optimizer=ADAMW, feature_dimension=FEATURES, plan=plan, seed=seed,
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


def valid(batch, frames: int) -> np.ndarray:
    return np.arange(frames)[None, :] < batch.output_lengths[:, None]


# --- discovery, size, layout, init ---------------------------------------------------------------


def test_the_folder_is_the_family_with_the_mixed_precisions():
    assert FAMILIES["conformer"] is FAMILY
    assert FAMILY.precisions == {"fp32", "tf32", "bf16", "fp16"}
    capabilities = tf_backend.TensorFlowBackend.capabilities
    assert "conformer" in capabilities.families
    assert capabilities.precisions_of("conformer") == FAMILY.precisions


def test_weights_go_in_and_come_back_exactly_in_kerass_own_orientation():
    weights = PARTS.random_weights(TINY, FEATURES, seed=1)
    backend = build()
    try:
        backend.import_weights(weights)
        exported = backend.export_weights()
        model = backend.model
        # No transposes: each Keras variable holds the neutral array as it is.
        assert np.array_equal(model.blocks[1].attention.qkv.kernel.numpy(), weights["blocks.1.attention.qkv.kernel"])
        assert np.array_equal(model.subsampling.kernels[1].numpy(), weights["subsampling.1.kernel"])
        assert np.array_equal(model.blocks[0].conv.depthwise.numpy(), weights["blocks.0.conv.depthwise.kernel"])
        with pytest.raises(BenchbaseError):
            backend.import_weights({**weights, "output.kernel": weights["output.kernel"].T.copy()})
    finally:
        backend.close()
    assert all(np.array_equal(exported[name], weights[name]) for name in weights)


def test_init_is_xavier_uniform_with_the_specs_fans_and_zero_vectors():
    keras.utils.set_random_seed(0)
    model = ConformerModelSpec(symbols=30, encoder_dim=64, attention_heads=4, encoder_layers=1,
                               conv_kernel_size=31, subsampling_layers=2)
    weights = {name: variable.numpy() for name, variable in neutral_variables(Conformer(model, 40)).items()}
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
    frames enough (121) that float32 sinusoids' rounding would show if it exceeded the bound."""
    weights = PARTS.random_weights(model, FEATURES, seed=2)
    batch = random_batch(model, frames=121, lengths=(121, 64, 23, 9))
    backend = build(model)
    try:
        backend.import_weights(weights)
        found = backend.predict(batch.inputs())
    finally:
        backend.close()
    exact, bound = PARTS.bounded_outputs(weights, model, batch.features, batch.feature_lengths,
                                         operand_roundoff=0.0, draws=INJECTION_DRAWS)
    assert found.dtype == np.float32 and found.shape == exact.shape == (4, model.output_frames(121), model.symbols)
    mask = valid(batch, found.shape[1])
    assert np.all(np.abs(found - exact)[mask] <= bound[mask])


def test_the_positions_are_the_references_rounded_once_to_float32():
    found = positions(2000, 16, TINY.max_timescale).numpy()
    assert np.array_equal(found, reference_positions(2000, 16, TINY.max_timescale).astype(np.float32))


def test_an_utterances_outputs_do_not_depend_on_the_padding_of_its_batch():
    """Two subsampling layers: the first layer's mask decides what its last valid row reads."""
    weights = PARTS.random_weights(TINY, FEATURES, seed=3)
    batch = random_batch(frames=57, lengths=(57, 42, 22, 9))
    backend = build()
    try:
        backend.import_weights(weights)
        together = backend.predict(batch.inputs())
        alone = [backend.predict(Batch(features=batch.features[row : row + 1, :length],
                                       feature_lengths=batch.feature_lengths[row : row + 1],
                                       output_lengths=batch.output_lengths[row : row + 1], labels=batch.labels,
                                       label_lengths=batch.label_lengths, utterance_ids=(), transcripts=()).inputs())
                 for row, length in enumerate(batch.feature_lengths)]
    finally:
        backend.close()
    for row, own in enumerate(alone):
        frames = batch.output_lengths[row]
        assert own.shape[1] == frames
        assert np.abs(together[row, :frames] - own[0]).max() <= 64 * FLOAT32_UNIT_ROUNDOFF * np.abs(own).max(), row


# --- precisions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", [
    pytest.param("bf16", marks=pytest.mark.skipif(not cpu_has_bfloat16_units(),
                                                  reason="oneDNN has no bfloat16 convolution on this CPU (or cap)")),
    "fp16"])
def test_the_half_precisions_predict_float32_log_probabilities_near_fp32_and_train(precision):
    # Here, not at the top: this file also runs as a script (the two-replica step's child), without
    # the tests' folder on its path.
    from numerics import half_outputs_against_bounds

    weights = PARTS.random_weights(TINY, FEATURES, seed=7)
    batch = random_batch()
    backend = build(TINY.model_copy(update={"precision": precision}))
    try:
        backend.import_weights(weights)
        found = backend.predict(batch.inputs())
        loss = backend.train_step(batch)
    finally:
        backend.close()
    assert found.dtype == np.float32
    # visibly not float32 (beyond its bound), within the half precision's (both sides)
    float32_bound, difference, half_bound = half_outputs_against_bounds(weights, TINY, batch.inputs(), found, precision)
    assert float32_bound < difference <= half_bound
    assert np.isfinite(loss)


def test_bf16_on_a_cpu_without_bfloat16_kernels_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # as make test-isa holds oneDNN on an AVX-512 machine
    with pytest.raises(BenchbaseError, match=r"in bf16 on a CPU only where oneDNN has bfloat16 kernels") as raised:
        build(TINY.model_copy(update={"precision": "bf16"}))
    assert "\n" not in str(raised.value)


def test_int8_emulated_is_refused():
    with pytest.raises(BenchbaseError, match="conformer"):
        build(TINY.model_copy(update={"precision": "int8-emulated"}))


# --- two replicas (tf.distribute over two logical CPUs, in a fresh interpreter) ---------------


def main(out: Path) -> None:
    """One training step on two replicas, then on one, from the same weights and batch.

    The CPU can be split into logical devices only before TensorFlow's first operation, so this
    runs as a script, the two-replica build first (as plugins/tf_ds2/tests/test_tf_distributed.py).
    The replicas' slices (rows 57, 40 | 23, 9 frames) hold different numbers of valid frames."""
    model = TINY.model_copy(update={"batchnorm_momentum": 0.5})
    weights = PARTS.random_weights(model, FEATURES, seed=8)
    batch = random_batch(model, frames=57)
    results = {}
    for replicas in (REPLICAS, 1):
        backend = build(model, replicas=replicas)
        backend.import_weights(weights)
        results[f"loss/{replicas}"] = np.array(backend.train_step(batch))
        after = backend.export_weights()
        results[f"weights/{replicas}"] = _compared(after, model)
        reference = PARTS.reference_step(weights, model, batch)
        results[f"statistics_excess/{replicas}"] = np.array(
            largest_statistic_excess(weights, after, batchnorm_names(model), reference))
        copies = [[copy.numpy() for copy in getattr(variable.value, "values", [variable.value])]
                  for variable in backend.model.variables]
        results[f"diverged/{replicas}"] = np.array(sum(any(not np.array_equal(c[0], other) for other in c[1:])
                                                        for c in copies))
        results[f"devices/{replicas}"] = np.array(len(backend.devices_in_use()))
        backend.close()
    results["initial"] = _compared(weights, model)
    results["loss_bound"] = np.array(BOTH_SIDES * reference.loss_bound / abs(reference.loss))  # relative
    np.savez(out, **results)


def _compared(weights: dict[str, np.ndarray], model: ConformerModelSpec) -> np.ndarray:
    """Every weight in one vector, but the attention's key biases: their exact gradient is zero
    (a key bias adds the same q . b to every score of a query, which the softmax cancels), so
    their computed gradients are rounding noise, which AdamW's first step, g / (|g| + eps), turns
    into moves of up to the learning rate's size that no bound on the loss can bound."""
    d = model.encoder_dim
    return np.concatenate([(array[np.r_[0:d, 2 * d : 3 * d]] if name.endswith("attention.qkv.bias") else array).ravel()
                           for name, array in weights.items()])


def test_a_two_replica_step_is_the_one_replica_step(tmp_path):
    """The BatchNorm statistics over both replicas' valid frames (statistics per replica miss the
    running ones far outside their bounds); the loss and the updated weights within float32's
    bound of the one-replica step, as in test_tf_distributed.py."""
    out = tmp_path / "results.npz"
    finished = subprocess.run([sys.executable, __file__, str(out)], capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    with np.load(out) as results:
        found = dict(results)
    assert found[f"devices/{REPLICAS}"] == REPLICAS and found["devices/1"] == 1
    assert found[f"statistics_excess/{REPLICAS}"] <= 0 and found["statistics_excess/1"] <= 0
    assert found[f"diverged/{REPLICAS}"] == 0  # every replica's copy of every variable the same
    bound = float(found["loss_bound"])
    one, two = float(found["loss/1"]), float(found[f"loss/{REPLICAS}"])
    assert abs(two - one) <= bound * abs(one)
    moved = np.linalg.norm(found["weights/1"] - found["initial"])
    assert np.linalg.norm(found[f"weights/{REPLICAS}"] - found["weights/1"]) <= bound * moved


if __name__ == "__main__":
    main(Path(sys.argv[1]))
