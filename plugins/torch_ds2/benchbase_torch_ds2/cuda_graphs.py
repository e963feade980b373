"""CUDA graphs of the network's training forward and backward, one per batch shape.

A training step launches thousands of small kernels (BatchNorm, dropout, activations, autocast's
casts around cuDNN's LSTMs), and at bf16 the GPU finishes them faster than the CPU launches them:
on an H100 the full ds2 model sat at 11% of the BF16 peak, and a graph of its forward and backward
took it to 14% (docs/BENCHMARKS.md, "Full ds2 through the harness on one H100"). A graph records
the launches once and replays them with one call.

``GraphedNetwork`` stands where training calls the network. Called with tensors of a signature
(shapes, dtypes, autocast) it has captured, it replays that signature's graph; with a new one it
captures it (``torch.cuda.make_graphed_callables``), up to ``MAX_GRAPHS`` signatures; beyond them,
or where a capture failed, the network runs eagerly. The loss, the optimizer and everything else
stay eager. What a capture does differently from eager, and how that is undone:

- Before capturing, ``make_graphed_callables`` runs the forward and backward on the batch a few
  times for real (``WARM_UP_PASSES``, on a side stream). Those passes would move BatchNorm's
  running statistics (every buffer of the network) and advance the CUDA generator: both are put
  back as they were, so the step that captured trains as an eager step would.
- Replays draw dropout's masks from the CUDA generator's graph-safe offsets: fresh masks each
  step, from the generator's state at the replay, but not the very masks an eager step draws.
- Each graph keeps its own memory pool (its activations and gradients stay allocated between
  steps); ``memory_bytes`` is what the captures added to what the caching allocator reserves.

The family says whether its training forward can be captured at all (``ModelFamily.cuda_graphs``:
static shapes, no host synchronization inside); the backend uses graphs only on one CUDA device,
outside DDP and int8-emulated, and where the hardware profile leaves ``devices.cuda_graphs`` on.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import torch

__all__ = ["MAX_GRAPHS", "GraphedNetwork", "SignatureGraphs"]

MAX_GRAPHS = 8
"""Signatures captured at most: a fixed padding has one; length buckets a few; more stay eager."""

WARM_UP_PASSES = 3
"""make_graphed_callables's default: cuDNN and cuBLAS pick their algorithms before the capture."""


class _Forward(torch.nn.Module):
    """The network's forward as a module of its own, so that each signature's capture replaces
    this wrapper's forward and never the network's (which predict() and other shapes run)."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.network(*tensors)


class SignatureGraphs:
    """Graphs by call signature, each captured on its first call up to ``max_graphs``, and what the
    captures cost: the bookkeeping that the network's graphs and the transducer loss's
    (``rnnt.graphed_loss``) share, and that the backend reports as the run's ``cuda_graph_*`` metrics."""

    def __init__(self, max_graphs: int = MAX_GRAPHS) -> None:
        self.max_graphs = max_graphs
        self._graphs: dict[tuple, Callable | None] = {}  # None: its capture failed; eager
        self.capture_seconds = 0.0
        self.memory_bytes = 0
        """What the captures added to what the caching allocator reserves (each graph's own pool)."""
        self.failures: list[str] = []

    @property
    def captured(self) -> int:
        return sum(graph is not None for graph in self._graphs.values())

    def graph_for(self, signature: tuple, device: torch.device, capture: Callable[[], Callable]) -> Callable | None:
        """``signature``'s graph, captured now by ``capture()`` if the signature is new and there is
        room for it; None where the call runs eagerly (no room, or its capture failed)."""
        if signature not in self._graphs:
            if len(self._graphs) >= self.max_graphs:
                return None
            self._graphs[signature] = self._measured_capture(device, capture)
        return self._graphs[signature]

    def _measured_capture(self, device: torch.device, capture: Callable[[], Callable]) -> Callable | None:
        reserved = torch.cuda.memory_reserved(device)
        started = time.perf_counter()
        try:
            graphed = capture()
        except RuntimeError as error:  # a host synchronization or dynamic shape in what it captures
            self.failures.append(f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}")
            graphed = None
        torch.cuda.synchronize(device)
        self.capture_seconds += time.perf_counter() - started
        self.memory_bytes += max(0, torch.cuda.memory_reserved(device) - reserved)
        return graphed


class GraphedNetwork(torch.nn.Module, SignatureGraphs):
    """The network for training: a captured graph per signature, eager otherwise."""

    def __init__(self, network: torch.nn.Module, max_graphs: int = MAX_GRAPHS) -> None:
        torch.nn.Module.__init__(self)
        SignatureGraphs.__init__(self, max_graphs)
        self.network = network

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        if not self.network.training or not all(t.is_cuda for t in tensors):
            return self.network(*tensors)
        signature = (tuple((tuple(t.shape), t.dtype) for t in tensors), torch.is_autocast_enabled("cuda"),
                     torch.get_autocast_dtype("cuda"))
        graph = self.graph_for(signature, tensors[0].device, lambda: self._capture(tensors))
        return self.network(*tensors) if graph is None else graph(*tensors)

    def _capture(self, tensors: tuple[torch.Tensor, ...]) -> Callable:
        """A graph of the forward and backward for these tensors' signature, with the network's
        buffers and the CUDA generator put back as they were before its warm-up passes."""
        device = tensors[0].device
        # No autograd graph of an earlier step may outlive this point: a parameter's gradient
        # accumulator it holds, made on the default stream, would make the captured backward wait on it.
        gc.collect()
        buffers = {name: buffer.clone() for name, buffer in self.network.named_buffers()}
        generator = torch.cuda.get_rng_state(device)
        try:
            return torch.cuda.make_graphed_callables(_Forward(self.network), tensors, num_warmup_iters=WARM_UP_PASSES)
        finally:
            with torch.no_grad():
                for name, buffer in self.network.named_buffers():
                    buffer.copy_(buffers[name])
            torch.cuda.set_rng_state(generator, device)
