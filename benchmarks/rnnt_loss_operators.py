"""The torch transducer loss's operators per step, and its time eager and from CUDA graphs.

    python benchmarks/rnnt_loss_operators.py [--batch 64] [--frames 278] [--labels 70] [--device cpu|cuda]

``lattice_losses`` (``benchbase_torch_ds2.rnnt.loss``) on random lattices of the full rnnt's
shapes by default: MLPerf's per-GPU batch of 64, every utterance padded to 1670 feature frames
(278 encoder frames) and labels up to 70 pieces, the label lengths drawn from 30 to 70. First the
operators its forward and backward call, counted with torch.profiler (the top-level aten calls;
"kernels" leaves out views and allocations, which launch nothing): what a GPU's host has to
launch one by one in an eager step. Then the median milliseconds of forward and backward over
``--repeats`` after a warm-up: eager on ``--device``, and on a CUDA device also through
``graphed_loss.LossGraphs`` (its capture on the first call, not counted), the two interleaved.
docs/BENCHMARKS.md, "The transducer loss's operators", has the counts and the times.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import torch
from benchbase_torch_ds2.rnnt.graphed_loss import LossGraphs
from benchbase_torch_ds2.rnnt.loss import lattice_losses
from torch.profiler import ProfilerActivity, profile

NO_KERNEL = {"aten::select", "aten::slice", "aten::unbind", "aten::as_strided", "aten::view", "aten::expand",
             "aten::unsqueeze", "aten::t", "aten::transpose", "aten::_unsafe_view", "aten::reshape", "aten::alias",
             "aten::detach", "aten::lift_fresh", "aten::empty", "aten::empty_strided", "aten::empty_like",
             "aten::resize_", "detach"}
"""Operators that only make a view or allocate: no kernel to launch."""


def lattices(batch: int, frames: int, labels: int, device: str, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, frames, labels + 1)
    blank = torch.rand(shape, generator=generator).log().to(device).requires_grad_()
    emit = torch.rand(shape, generator=generator).log().to(device).requires_grad_()
    output_lengths = torch.full((batch,), frames, device=device)
    label_lengths = torch.randint(min(30, labels), labels + 1, (batch,), generator=generator).to(device)
    return blank, emit, output_lengths, label_lengths


def operator_counts(arguments) -> collections.Counter:
    """Each top-level aten operator of one forward and backward, and how often it was called."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        lattice_losses(*arguments).sum().backward()
    counts: collections.Counter = collections.Counter()
    for event in profiler.events():
        parent = event.cpu_parent
        if event.name.startswith("aten::") and not (parent is not None and parent.name.startswith("aten::")):
            counts[event.name] += 1
    return counts


def timed(loss, arguments, device: str) -> float:
    """Milliseconds of one forward and backward, the device's work included."""
    blank, emit, *_ = arguments
    blank.grad = emit.grad = None
    started = time.perf_counter()
    loss(*arguments).sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--frames", type=int, default=278, help="encoder frames T'")
    parser.add_argument("--labels", type=int, default=70, help="the longest labels U")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    arguments = lattices(args.batch, args.frames, args.labels, args.device)
    counts = operator_counts(lattices(args.batch, args.frames, args.labels, "cpu"))
    kernels = sum(count for name, count in counts.items() if name not in NO_KERNEL)
    print(f"batch {args.batch}, T' {args.frames}, U {args.labels}: {args.frames + args.labels} diagonals; "
          f"forward and backward call {sum(counts.values())} operators, {kernels} of them launching kernels")
    most = counts.most_common(8)
    print("most called: " + ", ".join(f"{name.removeprefix('aten::')} {count}" for name, count in most))
    losses = {"eager": lattice_losses}
    if args.device == "cuda":
        losses["CUDA graphs"] = LossGraphs(max_label_length=args.labels)
    times: dict[str, list[float]] = {name: [] for name in losses}
    for loss in losses.values():  # warm-up; the graphs capture here
        timed(loss, arguments, args.device)
    for repeat in range(args.repeats):
        for name in losses if repeat % 2 == 0 else reversed(losses):
            times[name].append(timed(losses[name], arguments, args.device))
    for name, values in times.items():
        print(f"{name} on {args.device}: median {statistics.median(values):.2f} ms forward and backward "
              f"(min {min(values):.2f}, max {max(values):.2f}, {args.repeats} repeats)")
    if "CUDA graphs" in losses:
        graphs = losses["CUDA graphs"]
        print(f"captured {graphs.captured} graph(s) in {graphs.capture_seconds:.2f} s, "
              f"{graphs.memory_bytes / 2**20:.1f} MiB reserved, failures: {graphs.failures or 'none'}")


if __name__ == "__main__":
    main()
