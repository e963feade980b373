"""The torch backend's RNN-T family against benchbase's NumPy reference (benchbase.families.rnnt), on the
same weights, with tolerances from the error model (benchbase.numerics.tolerances); and its training,
checkpoint and predict contract on a tiny model."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
import torch

from benchbase.backend import Batch, BuildContext, DevicePlan, Inputs
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.store import FeatureStore
from benchbase.errors import BenchbaseError
from benchbase.families.rnnt import loss as reference_loss
from benchbase.families.rnnt import reference
from benchbase.families.rnnt.bounds import joint_bound, rounded_encoder, transducer_gradient_bound
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.numerics.rounded import RoundedArithmetic, lstm_layer
from benchbase.numerics.tolerances import (
    BOTH_SIDES,
    FLOAT32_UNIT_ROUNDOFF,
    FLOAT64_UNIT_ROUNDOFF,
    after_steps,
    ctc_recursion_bounds,
    rounding_bound,
)
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs.optimizer import AdamWSpec

torch_backend = pytest.importorskip("benchbase_torch_ds2.backend")
from benchbase_torch_ds2.rnnt.loss import (  # noqa: E402
    lattice_losses,
    mean_over_batch,
    transducer_lattice,
    transducer_losses,
)
from benchbase_torch_ds2.rnnt.model import RNNTransducer, import_weights  # noqa: E402

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

FEATURES = 13  # the small store's MFCCs
TINY = RNNTModelSpec(symbols=30, input_stack=3, input_subsample=3, encoder_pre_layers=1, stack_time_factor=2,
                     encoder_post_layers=2, encoder_units=12, prediction_embedding=8, prediction_layers=2,
                     prediction_units=10, joint_units=16, dropout=0.1)
NO_DROPOUT = TINY.model_copy(update={"dropout": 0.0})
ADAMW = AdamWSpec(learning_rate=3e-3, warmup_steps=3, hold_steps=2, decay_every_steps=4, decay_factor=0.5,
                  weight_decay=1e-3, gradient_clip_norm=5.0)
CPU = DevicePlan(kind="cpu", count=1, batch_per_device=4, threads=1)


def build(model=TINY, optimizer=ADAMW, seed=0, features=FEATURES):
    backend = torch_backend.TorchBackend()
    backend.build(BuildContext(model=model, optimizer=optimizer, feature_dimension=features, plan=CPU, seed=seed,
                               max_frames=600, max_label_length=100))
    return backend


def random_batch(seed=0, rows=4, frames=47, labels=6, model=TINY):
    """Random features and labels; the last row has too few frames for an encoder frame (an impossible alignment)."""
    rng = np.random.default_rng(seed)
    feature_lengths = np.array([frames, frames - 9, frames - 20, model.input_stack], dtype=np.int32)[:rows]
    label_lengths = np.array([labels, 2, labels - 1, 3], dtype=np.int32)[:rows]
    label_values = rng.integers(1, model.symbols, (rows, labels)).astype(np.int32)
    label_values[np.arange(labels) >= label_lengths[:, None]] = model.blank_index
    return Batch(features=rng.normal(size=(rows, frames, FEATURES)).astype(np.float32), feature_lengths=feature_lengths,
                 output_lengths=model.output_frames(feature_lengths), labels=label_values, label_lengths=label_lengths,
                 utterance_ids=tuple(f"u{i}" for i in range(rows)), transcripts=("",) * rows)


def network_on(weights, model=NO_DROPOUT):
    network = RNNTransducer(model, FEATURES)
    import_weights(network, weights)
    return network.eval()


@pytest.fixture(scope="module")
def weights():
    return reference.random_weights(NO_DROPOUT, FEATURES, np.random.default_rng(3))


# --- the forward pass, the loss and its gradient against the reference -------------------------


def test_the_prediction_network_equals_the_reference(weights):
    batch = random_batch()
    with torch.no_grad():
        predicted = network_on(weights).predict_net(torch.from_numpy(batch.labels),
                                                    torch.from_numpy(batch.label_lengths)).double().numpy()
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    exact, bound = rounding_bound(lambda rounding: {"g": _rounded_prediction(w, batch, RoundedArithmetic(rounding))})
    assert predicted.shape == (4, batch.labels.shape[1] + 1, NO_DROPOUT.prediction_units)
    assert np.allclose(exact["g"], reference.prediction_forward(weights, NO_DROPOUT, batch.labels, batch.label_lengths))
    assert np.all(np.abs(predicted - exact["g"]) <= bound["g"])


def test_the_joint_log_probabilities_equal_the_reference_within_their_rounding_bound(weights):
    """On the network's own float32 f and g, so that only the joint's roundings are compared."""
    batch = random_batch()
    network = network_on(weights)
    with torch.no_grad():
        encoded = network.encode(torch.from_numpy(batch.features))
        predicted = network.predict_net(torch.from_numpy(batch.labels), torch.from_numpy(batch.label_lengths))
        log_probs = network.joint(encoded, predicted).double().numpy()
    f, g = encoded.double().numpy(), predicted.double().numpy()
    exact = reference.joint(weights, NO_DROPOUT, f, g)
    assert np.all(np.abs(log_probs - exact) <= joint_bound(weights, f, g))


def test_training_computes_the_joint_on_the_cells_within_the_lengths_only(weights):
    """``lattice`` (training's packed joint) reads what the loss reads of the full ``joint``."""
    batch = random_batch()
    network = network_on(weights)
    labels, label_lengths = torch.from_numpy(batch.labels), torch.from_numpy(batch.label_lengths).long()
    output_lengths = torch.from_numpy(batch.output_lengths).long()
    with torch.no_grad():
        encoded = network.encode(torch.from_numpy(batch.features))
        predicted = network.predict_net(labels, label_lengths)
        packed = network.lattice(encoded, predicted, labels, output_lengths, label_lengths)
        full = transducer_lattice(network.joint(encoded, predicted), labels, label_lengths, 0)
    bound = joint_bound(weights, encoded.double().numpy(), predicted.double().numpy())
    inside = ((np.arange(packed[0].shape[1]) < batch.output_lengths[:, None])[:, :, None]
              & (np.arange(packed[0].shape[2]) <= batch.label_lengths[:, None])[:, None, :])
    emits = inside & (np.arange(packed[0].shape[2]) < batch.label_lengths[:, None])[:, None, :]
    for found, expected, cells in zip(packed, full, (inside, emits)):
        found, expected = found.double().numpy(), expected.double().numpy()
        assert np.isneginf(found[~cells]).all() and np.isfinite(found[cells]).all()
        assert np.all(np.abs(found[cells] - expected[cells]) <= 2 * bound.max(axis=-1)[cells])  # two float32 sides


def test_the_packed_joint_gives_the_full_joints_gradients(weights):
    """Every parameter's gradient through training's packed lattice equals that through the full
    joint, in float64: any order of the same float64 sums agrees far within float32's unit roundoff
    of the gradient's magnitude, which a wrong or missing cell exceeds."""
    batch = random_batch()
    network = network_on(weights).double()
    labels, label_lengths = torch.from_numpy(batch.labels), torch.from_numpy(batch.label_lengths).long()
    output_lengths, features = torch.from_numpy(batch.output_lengths).long(), torch.from_numpy(batch.features).double()

    def gradients(losses):
        network.zero_grad()
        mean_over_batch(losses).backward()
        return {name: value.grad.clone() for name, value in network.named_parameters() if value.requires_grad}

    packed = gradients(lattice_losses(*network(features, labels, output_lengths, label_lengths), output_lengths,
                                      label_lengths))
    log_probs = network.joint(network.encode(features), network.predict_net(labels, label_lengths))
    full = gradients(transducer_losses(log_probs, labels, output_lengths, label_lengths, 0))
    for name, gradient in full.items():
        assert (packed[name] - gradient).abs().max() <= FLOAT32_UNIT_ROUNDOFF * gradient.abs().max(), name
    assert all(gradient.abs().max() > 0 for gradient in full.values())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_loss_and_its_gradient_equal_the_reference(weights, dtype):
    """Per utterance, on the very same log-probabilities. float64 checks the algorithm to float64's
    roundoff; float32 is what training computes, within the recursion's rounding bound."""
    batch = random_batch()
    encoded, _ = reference.encoder_forward(weights, NO_DROPOUT, batch.features, batch.feature_lengths)
    predicted = reference.prediction_forward(weights, NO_DROPOUT, batch.labels, batch.label_lengths)
    log_probs = reference.joint(weights, NO_DROPOUT, encoded, predicted)
    if dtype == torch.float32:
        log_probs = log_probs.astype(np.float32).astype(np.float64)  # both sides read the same values
    arguments = (batch.labels, batch.output_lengths, batch.label_lengths, NO_DROPOUT.blank_index)
    expected = reference_loss.transducer_loss(log_probs, *arguments)
    expected_gradient = reference_loss.transducer_loss_gradient(log_probs, *arguments)
    leaf = torch.tensor(log_probs, dtype=dtype, requires_grad=True)
    losses = transducer_losses(leaf, *(torch.from_numpy(np.asarray(a)) for a in arguments[:3]), arguments[3])
    losses.sum().backward()
    assert batch.output_lengths[-1] == 0 and np.isinf(expected[-1])  # the impossible alignment
    assert losses[-1].item() == 0.0 and not leaf.grad[-1].any()  # counts zero, with zero gradient
    unit_roundoff = FLOAT64_UNIT_ROUNDOFF if dtype == torch.float64 else FLOAT32_UNIT_ROUNDOFF
    steps = batch.output_lengths + batch.label_lengths + 1  # the anti-diagonals, then the final blank
    bound = ctc_recursion_bounds(steps, expected, unit_roundoff)
    assert np.all(np.abs(losses.detach().double().numpy() - np.where(np.isinf(expected), 0.0, expected)) <= bound)
    gradient = leaf.grad.double().numpy()
    assert np.all(np.abs(gradient - expected_gradient) <= transducer_gradient_bound(expected_gradient, expected, steps,
                                                                          unit_roundoff))
    assert np.abs(expected_gradient).max() > 0.1  # a gradient to compare, not zeros


def _rounded_joint(w, encoded, predicted, rounded):
    """``reference.joint`` with each accumulation and vector function moved by its rounding bound."""
    projected = rounded.dot(predicted, w["joint.prediction.kernel"], w["joint.prediction.bias"])
    hidden = np.maximum(rounded.function(encoded[:, :, None, :] + projected[:, None, :, :]), 0.0)
    logits = rounded.dot(hidden, w["joint.output.kernel"], w["joint.output.bias"])
    shifted = rounded.function(logits - logits.max(axis=-1, keepdims=True))
    total = rounded.sum(rounded.function(np.exp(shifted)), axis=-1)
    return rounded.function(shifted - rounded.function(np.log(total))[..., None])


def _rounded_prediction(w, batch, rounded):
    padded = np.where(np.arange(batch.labels.shape[1]) < batch.label_lengths[:, None], batch.labels, 0)
    x = w["prediction.embedding"][np.concatenate([np.zeros((len(padded), 1), np.int64), padded], axis=1)]
    for layer in range(NO_DROPOUT.prediction_layers):
        prefix = f"prediction.lstm.{layer}"
        x = lstm_layer(x, w[f"{prefix}.input_kernel"], w[f"{prefix}.recurrent_kernel"], w[f"{prefix}.bias"],
                       rounded=rounded)
    return x


# --- weights: init, the neutral layout ----------------------------------------------------------


def test_init_is_the_specs_and_the_seed_decides_it():
    first, again, other = (build(seed=seed).export_weights() for seed in (0, 0, 1))
    assert all(np.array_equal(first[name], again[name]) for name in first)
    assert not np.array_equal(first["encoder.lstm.0.input_kernel"], other["encoder.lstm.0.input_kernel"])
    for name, value in first.items():
        if value.ndim == 2:
            limit = np.sqrt(6.0 / sum(value.shape))  # Xavier-uniform over the layout's whole matrix
            assert np.abs(value).max() <= limit and np.abs(value).max() > 0.8 * limit, name
        elif ".lstm." in name:
            units = value.shape[0] // 4
            assert (value[units : 2 * units] == TINY.lstm_forget_bias).all()
            assert not np.delete(value, np.s_[units : 2 * units]).any()
        else:
            assert not value.any(), name
    backend = build()
    assert backend.parameter_count() == TINY.parameter_count(FEATURES)
    assert all(not lstm.bias_hh_l0.requires_grad and not lstm.bias_hh_l0.any()
               for lstm in (*backend.network.encoder, *backend.network.prediction))


# --- the backend contract ------------------------------------------------------------------------


def test_the_backend_declares_both_families_and_optimizers():
    capabilities = torch_backend.TorchBackend.capabilities
    assert {"ds2", "rnnt"} <= capabilities.families and {"adadelta", "adamw"} <= capabilities.optimizers


def test_adamw_settings_and_the_schedule_reach_the_framework():
    backend = build()
    group = backend.optimizer.param_groups[0]
    assert isinstance(backend.optimizer, torch.optim.AdamW)
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.9, 0.999), 1e-8, 1e-3)
    batch = random_batch()
    for step in range(7):
        backend.train_step(batch)
        assert group["lr"] == ADAMW.learning_rate_at(step)


def test_ds2_trains_with_adamw_too():
    workload = builtin_workload("ds2-mini")
    backend = torch_backend.TorchBackend()
    backend.build(BuildContext(model=workload.model, optimizer=ADAMW, feature_dimension=FEATURES, plan=CPU, seed=0,
                               max_frames=600, max_label_length=100))
    assert isinstance(backend.optimizer, torch.optim.AdamW)


def test_same_seed_same_first_losses_and_training_lowers_the_loss(small_store):
    batch = next(iter(BatchPipeline(FeatureStore(small_store), ("train",), 4, model=TINY, seed=0).epoch(0)))
    features = batch.features.shape[2]
    assert (batch.output_lengths > 0).all()
    optimizer = AdamWSpec(learning_rate=0.02)
    first = build(optimizer=optimizer, features=features)
    losses = [first.train_step(batch) for _ in range(12)]
    again = build(optimizer=optimizer, features=features)  # build() seeds torch's generator, dropout's too
    assert [again.train_step(batch) for _ in range(3)] == losses[:3]  # same kernels, same dropout masks
    assert losses[-1] < 0.8 * losses[0]


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    """(That one continues training exactly is the kit's checkpoint_round_trip rule.)"""
    build().save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(BenchbaseError, match="not a checkpoint of this model"):
        build(TINY.model_copy(update={"joint_units": 8})).load_checkpoint(tmp_path / "ckpt")


def test_predict_of_utterances_without_an_encoder_frame_returns_no_frames():
    """(predict's outputs and that it changes no state are the kit's predict_shapes and forward_parity.)"""
    batch, backend = random_batch(seed=2), build()
    short = Inputs(batch.features[:, :4], np.full(4, 4, np.int32), np.zeros(4, np.int32))  # no encoder frame
    assert backend.predict(short).shape == (4, 0, TINY.joint_units)


@pytest.mark.slow
def test_two_ranks_train_the_same_global_batches_as_one(tmp_path):
    """DDP over gloo, each rank its half of every batch, against one process on the whole batch.

    Bounds as tests/test_distributed.py's: the first loss within both sides' float32 rounding bound
    of the loss at the initial weights (the reference, every operation moved: ``rounding_bound``),
    the later ones within it compounded (``after_steps``), the final weights' distance as a share
    of how far training moved them. Measured: the losses agree to the last bit, the weights to 6e-8.
    """
    steps, batch = 4, random_batch(seed=1)
    torch.multiprocessing.spawn(_ddp_rank, args=(str(tmp_path), steps), nprocs=2)
    two = np.load(tmp_path / "losses.npy")
    single = build(NO_DROPOUT)
    initial = single.export_weights()
    one = np.array([single.train_step(batch) for _ in range(steps)])
    first = BOTH_SIDES * _loss_bound(initial, batch) / abs(one[0])
    relative = np.abs(one - two) / np.abs(one)
    assert (relative <= np.array([after_steps(first, step) for step in range(steps)])).all(), (relative, first)
    final_one, final_two = single.export_weights(), np.load(tmp_path / "weights.npz")
    moved = np.sqrt(sum(np.sum((final_one[name] - initial[name]) ** 2) for name in initial))
    drift = np.sqrt(sum(np.sum((final_two[name] - final_one[name]) ** 2) for name in initial))
    assert drift <= after_steps(first, steps - 1) * moved, (drift, moved)


def _ddp_rank(rank, folder, steps):
    torch.distributed.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2,
                                         timeout=datetime.timedelta(seconds=120))  # a lost rank fails, not hangs
    backend = torch_backend.TorchBackend()
    try:
        plan = DevicePlan(kind="cpu", count=2, batch_per_device=2, threads=1, world_size=2, rank=rank, local_rank=rank)
        backend.build(BuildContext(model=NO_DROPOUT, optimizer=ADAMW, feature_dimension=FEATURES, plan=plan, seed=0,
                                   max_frames=600, max_label_length=100))
        batch = random_batch(seed=1)
        half = slice(2 * rank, 2 * rank + 2)  # the harness's own_slice: contiguous, rank order
        own = Batch(features=batch.features[half], feature_lengths=batch.feature_lengths[half],
                    output_lengths=batch.output_lengths[half], labels=batch.labels[half],
                    label_lengths=batch.label_lengths[half], utterance_ids=batch.utterance_ids[half],
                    transcripts=batch.transcripts[half])
        losses = [backend.train_step(own) for _ in range(steps)]
        if rank == 0:
            np.save(f"{folder}/losses.npy", np.array(losses))
            np.savez(f"{folder}/weights.npz", **backend.export_weights())
        torch.distributed.barrier()  # no rank closes its process group while the other still works
    finally:
        # The harness's order: the backend (its DDP reducer) goes first, the group after. A reducer
        # freed after destroy_process_group holds the group's last reference, and its destructor
        # joins gloo's thread while holding the GIL, which that thread may still need (a hang).
        backend.close()
        torch.distributed.destroy_process_group()


def _loss_bound(weights, batch):
    """One float32 side's bound on the batch's mean loss at ``weights``: the reference with every
    operation moved (encoder, prediction network, joint), plus the loss recursion's own rounding."""
    w = {name: value.astype(np.float64) for name, value in weights.items()}

    def compute(rounding):
        rounded = RoundedArithmetic(rounding)
        encoded = rounded_encoder(weights, NO_DROPOUT, batch.features, rounded)
        log_probs = _rounded_joint(w, encoded, _rounded_prediction(w, batch, rounded), rounded)
        losses = reference_loss.transducer_loss(log_probs, batch.labels, batch.output_lengths, batch.label_lengths, 0)
        return {"loss": np.array(np.where(np.isinf(losses), 0.0, losses).mean())}

    exact, bound = rounding_bound(compute)
    losses = np.full(batch.size, float(exact["loss"]))  # the recursion's bound, on the mean's magnitude
    recursion = ctc_recursion_bounds(batch.output_lengths + batch.label_lengths + 1, losses).max()
    return float(bound["loss"]) + recursion


def test_the_joints_dropout_is_inverted_dropout_at_the_specs_rate_in_training_only():
    network = RNNTransducer(TINY.model_copy(update={"dropout": 0.2}), FEATURES)
    ones = torch.ones(1000, 1000)
    dropped = network._joint_dropout(ones)
    kept = (dropped != 0).double().mean().item()
    spread = 5 * np.sqrt(0.2 * 0.8 / ones.numel())  # five binomial standard deviations
    assert abs(kept - 0.8) <= spread and torch.all((dropped == 0) | (dropped == 1.25))
    assert torch.equal(network.eval()._joint_dropout(ones), ones)


def test_the_loss_gradient_check_against_finite_differences():
    """The custom backward against torch's own numerical differentiation, in float64."""
    rng = np.random.default_rng(5)
    logits = torch.tensor(rng.normal(size=(2, 4, 3, 5)), requires_grad=True)
    labels = torch.tensor([[1, 3], [2, 0]])
    output_lengths, label_lengths = torch.tensor([4, 2]), torch.tensor([2, 1])

    def loss(x):
        return transducer_losses(torch.log_softmax(x, dim=-1), labels, output_lengths, label_lengths, 0)

    assert torch.autograd.gradcheck(loss, (logits,))


# --- mixed precision ---------------------------------------------------------------------------------


def test_fp16_with_loss_scaling_takes_finite_steps_when_built_directly():
    # The harness refuses fp16 on a CPU (it measures nothing there); built directly, it trains.
    backend = build(TINY.model_copy(update={"precision": "fp16"}))
    try:
        losses = [backend.train_step(random_batch(seed)) for seed in range(3)]
        outputs = backend.predict(random_batch().inputs())
    finally:
        backend.close()
    assert np.all(np.isfinite(losses)) and outputs.dtype == np.float32 and np.isfinite(outputs).all()
