"""The transducer loss from CUDA graphs (``benchbase_torch_ds2.rnnt.graphed_loss``).

What a graph needs of the loss is checked on any machine: the label axis padded to the run's
longest changes no loss and no gradient, off a GPU the loss runs eagerly, the family hands training
the graphs only where the profile allows them. That a replay equals the eager loss, batch after
batch of other label lengths, needs a GPU: marked ``gpu`` (`make test-gpu`), skipped without one.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from benchbase.backend import BuildContext, DevicePlan
from benchbase.families.rnnt.bounds import transducer_gradient_bound
from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF, ctc_recursion_bounds
from benchbase.plugin_host.builtins.workloads import builtin_workload

pytest.importorskip("benchbase_torch_ds2.backend")
from benchbase_torch_ds2.rnnt.family import RNNTFamily
from benchbase_torch_ds2.rnnt.graphed_loss import LossGraphs, padded_labels
from benchbase_torch_ds2.rnnt.loss import lattice_losses

CUDA = DevicePlan(kind="cuda", count=1, batch_per_device=8)
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def random_lattice(seed: int, frames: int = 23, labels: int = 7, device: str = "cpu"):
    """(blank, emit, output lengths, label lengths): log-probabilities of a batch of four, one
    utterance without an output frame (an impossible alignment)."""
    generator = torch.Generator().manual_seed(seed)
    shape = (4, frames, labels + 1)
    blank = torch.rand(shape, generator=generator).log().to(device).requires_grad_()
    emit = torch.rand(shape, generator=generator).log().to(device).requires_grad_()
    output_lengths = torch.tensor([frames, frames - 5, 0, 9], device=device)
    label_lengths = torch.tensor([labels, labels - 3, 2, 0], device=device)
    return blank, emit, output_lengths, label_lengths


def losses_and_gradients(loss, blank, emit, output_lengths, label_lengths):
    losses = loss(blank, emit, output_lengths, label_lengths)
    blank_gradient, emit_gradient = torch.autograd.grad(losses.sum(), (blank, emit))
    return losses.detach(), blank_gradient, emit_gradient


def float64_losses_and_gradients(blank, emit, output_lengths, label_lengths):
    """The lattice's losses and gradients in float64 on the CPU, from the same float32 values: what
    each float32 side is held to (the recursion itself is checked against the family's reference
    in test_torch_rnnt)."""
    leaves = [value.detach().cpu().double().requires_grad_() for value in (blank, emit)]
    return losses_and_gradients(lattice_losses, *leaves, output_lengths.cpu(), label_lengths.cpu())


def within_the_recursions_bound(found, exact, output_lengths, label_lengths) -> list[str]:
    """Where a float32 side's losses or gradients leave the error model's bound of the float64 ones
    (``ctc_recursion_bounds``, ``transducer_gradient_bound``); empty where they stay within."""
    steps = (output_lengths + label_lengths + 1).cpu().numpy()  # the anti-diagonals, then the final blank
    found = [value.detach().cpu().double().numpy() for value in found]
    losses, *gradients = (value.numpy() for value in exact)
    bounds = [ctc_recursion_bounds(steps, losses, FLOAT32_UNIT_ROUNDOFF)]
    bounds += [transducer_gradient_bound(gradient[..., None], losses, steps, FLOAT32_UNIT_ROUNDOFF)[..., 0]
               for gradient in gradients]
    return [f"{name}: {np.abs(value - expected).max():.3g} past a bound of {bound.max():.3g}"
            for name, value, expected, bound in zip(("loss", "blank gradient", "emit gradient"), found,
                                                    (losses, *gradients), bounds)
            if not np.all(np.abs(value - expected) <= bound)]


def test_padding_the_label_axis_changes_no_loss_and_no_gradient():
    """Cells past every utterance's labels are never read: the same numbers, bit for bit, and a
    zero gradient for the padded cells."""
    blank, emit, output_lengths, label_lengths = random_lattice(seed=0)
    plain = losses_and_gradients(lattice_losses, blank, emit, output_lengths, label_lengths)

    def padded(blank, emit, output_lengths, label_lengths):
        return lattice_losses(padded_labels(blank, 20), padded_labels(emit, 20), output_lengths, label_lengths)

    widened = losses_and_gradients(padded, blank, emit, output_lengths, label_lengths)
    assert padded_labels(blank, 20).shape == (4, 23, 20)
    for exact, found in zip(plain, widened):
        assert torch.equal(exact, found)
    assert plain[0][2] == 0.0 and plain[0][:2].gt(0).all()  # the impossible utterance counts zero


def test_off_a_gpu_the_loss_runs_eagerly():
    graphs = LossGraphs(max_label_length=20)
    arguments = random_lattice(seed=1)
    for exact, found in zip(losses_and_gradients(lattice_losses, *arguments), losses_and_gradients(graphs, *arguments)):
        assert torch.equal(exact, found)
    assert graphs.captured == 0 and not graphs.failures


def test_the_float32_loss_keeps_within_the_recursions_bound_and_a_moved_one_does_not():
    """The check a replay on a GPU is held to, run here on the eager float32 loss: it passes, and a
    loss moved by a thousandth does not."""
    arguments = random_lattice(seed=5)
    found = losses_and_gradients(lattice_losses, *arguments)
    exact = float64_losses_and_gradients(*arguments)
    assert within_the_recursions_bound(found, exact, *arguments[2:]) == []
    moved = (found[0] * 1.001, *found[1:])
    assert [failure.split(":")[0] for failure in within_the_recursions_bound(moved, exact, *arguments[2:])] == ["loss"]


def build_context(plan: DevicePlan) -> BuildContext:
    workload = builtin_workload("rnnt-mini")
    return BuildContext(model=workload.model, optimizer=workload.optimizer,
                        feature_dimension=workload.features.dimension, plan=plan, seed=0, max_frames=2000,
                        max_label_length=123)


def test_the_family_hands_training_the_graphs_where_the_profile_allows_them():
    network = RNNTFamily().build_network(build_context(CUDA))
    assert isinstance(network.loss_graphs, LossGraphs) and network.loss_graphs.positions == 124
    assert network.cuda_graph_sets() == [network.loss_graphs]
    for plan in (dataclasses.replace(CUDA, cuda_graphs=False), DevicePlan(kind="cpu", count=1, batch_per_device=8)):
        off = RNNTFamily().build_network(build_context(plan))
        assert off.loss_graphs is None and off.cuda_graph_sets() == []


# --- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
def test_replays_equal_the_eager_loss_for_every_label_length():
    """Three batches of one frame count and other label lengths share one graph (the label axis
    padded to the run's longest), and each replay, like the eager loss, keeps within the error
    model's bound of the float64 losses and gradients. On a CPU the padded loss is the unpadded one
    bit for bit; a GPU's elementwise kernels may take another vectorized path at another width, so
    equality is not what a GPU is held to, the recursion's rounding bound is."""
    graphs = LossGraphs(max_label_length=12)
    for seed, labels in ((2, 7), (3, 12), (4, 3)):
        arguments = random_lattice(seed, labels=labels, device="cuda")
        exact = float64_losses_and_gradients(*arguments)
        for name, loss in (("eager", lattice_losses), ("replay", graphs)):
            failures = within_the_recursions_bound(losses_and_gradients(loss, *arguments), exact, *arguments[2:])
            assert not failures, (name, labels, failures)
    assert graphs.captured == 1 and not graphs.failures, graphs.failures
