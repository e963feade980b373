"""The transducer loss replayed from CUDA graphs: thousands of tiny kernels launched by one call.

``loss.lattice_losses`` runs its two recursions one anti-diagonal at a time: at the full rnnt's
shapes on a GPU (a batch of 64 padded to 278 encoder frames and 70 labels, 348 diagonals) its
forward and backward make 5,319 operator calls, 3,193 of them launching a kernel of a few
thousand elements (counted with torch.profiler on a CPU, docs/BENCHMARKS.md, "The transducer
loss's operators"): each call costs the host microseconds, the kernel far less. The
network's own graphs (``cuda_graphs.GraphedNetwork``) cannot hold the transducer: its packed
joint finds the lattice's cells with ``nonzero()``. The loss has no such step, so it is captured
on its own.

``LossGraphs`` stands where training calls ``lattice_losses``. It pads the two lattices' label
axis to the run's longest labels (``BuildContext.max_label_length``: cells past an utterance's
labels are never read, and their gradient is 0), so that every batch of one frame count shares
one signature, and captures each signature once (``torch.cuda.make_graphed_callables``, forward
and backward), up to ``MAX_GRAPHS`` (``cuda_graphs.SignatureGraphs``, as the network's graphs do);
beyond them, off a CUDA device, or where a capture failed, the loss runs eagerly. The loss has no
parameters, buffers or random draws: the capture's warm-up passes change nothing, and a replay
computes what the eager loss computes, kernel for kernel.
"""

from __future__ import annotations

import torch

from benchbase_torch_ds2.cuda_graphs import MAX_GRAPHS, WARM_UP_PASSES, SignatureGraphs
from benchbase_torch_ds2.rnnt.loss import lattice_losses

__all__ = ["LossGraphs", "padded_labels"]


def padded_labels(lattice: torch.Tensor, positions: int) -> torch.Tensor:
    """A (batch, T', U + 1) lattice with its label axis continued with -inf to ``positions`` cells."""
    return torch.nn.functional.pad(lattice, (0, positions - lattice.shape[2]), value=float("-inf"))


class LossGraphs(SignatureGraphs):
    """``lattice_losses`` for training: replayed from a CUDA graph per lattice shape, eager elsewhere."""

    def __init__(self, max_label_length: int, max_graphs: int = MAX_GRAPHS) -> None:
        super().__init__(max_graphs)
        self.positions = max_label_length + 1

    def __call__(self, blank: torch.Tensor, emit: torch.Tensor, output_lengths: torch.Tensor,
                 label_lengths: torch.Tensor) -> torch.Tensor:
        if not blank.is_cuda or blank.shape[1] == 0 or blank.shape[2] > self.positions:
            return lattice_losses(blank, emit, output_lengths, label_lengths)
        blank, emit = padded_labels(blank, self.positions), padded_labels(emit, self.positions)
        arguments = (blank, emit, output_lengths.long(), label_lengths.long())
        signature = tuple((tuple(t.shape), t.dtype) for t in arguments)
        graph = self.graph_for(signature, blank.device, lambda: self._capture(arguments))
        return lattice_losses(*arguments) if graph is None else graph(*arguments)

    @staticmethod
    def _capture(arguments: tuple[torch.Tensor, ...]):
        """The loss's forward and backward captured for these arguments' shapes."""
        # Leaves of their own: the capture's warm-up passes differentiate the loss with respect to its
        # inputs only, and replays hand the real lattices' gradients back to the network.
        samples = tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in arguments)
        return torch.cuda.make_graphed_callables(lattice_losses, samples, num_warmup_iters=WARM_UP_PASSES)
