"""The Conformer's subsampling convolutions in PyTorch's default layout and channels-last, timed alone.

    python benchmarks/conformer_layout.py [--batch 4] [--frames 1670] [--threads 2] [--repeats 5]
    python benchmarks/conformer_layout.py --model conformer-mini --batch 32 --frames 800 --threads 1

The full conformer's two 3x3 stride-2 convolutions (1 to 512 channels, then 512 to 512: 61% of its
forward FLOPs), on a batch padded to ``--frames`` of 80 mel bands, as the torch backend runs them
(``benchbase_torch_ds2.conformer.model.Subsampling``: two zero rows padded after time and
frequency): per precision (fp32; bf16 under CPU autocast) and layout, the median forward and
backward milliseconds over ``--repeats`` after a warm-up pass. ``--model WORKLOAD`` times instead
the whole torch Conformer of a registered workload, forward and backward on random features (a
quarter of the rows padded to three quarters of the frames), built in each layout in turn
(``Subsampling.CHANNELS_LAST``), twice. Tables in docs/BENCHMARKS.md, "The Conformer's subsampling,
channels-last", come from it; under `python -m benchbase.testing.isa --cap avx2 --` it measures
the kernels of an AVX2 CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

CONVOLUTIONS = {"first (1 to 512)": (1, 512), "second (512 to 512)": (512, 512)}
LAYOUTS = {"default": torch.contiguous_format, "channels-last": torch.channels_last}


def timed(convolution: nn.Conv2d, inputs: torch.Tensor, precision: str, repeats: int) -> tuple[float, float]:
    """Median (forward ms, backward ms) of ``repeats`` passes after one not counted."""
    forward, backward = [], []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            outputs = convolution(inputs)
        middle = time.perf_counter()
        outputs.backward(torch.ones_like(outputs))
        ended = time.perf_counter()
        forward.append(1e3 * (middle - started))
        backward.append(1e3 * (ended - middle))
    return statistics.median(forward[1:]), statistics.median(backward[1:])


def model_steps(workload: str, batch: int, frames: int, repeats: int) -> None:
    """The workload's torch Conformer, forward and backward, in each layout, twice, side by side."""
    from benchbase_torch_ds2.conformer import model as conformer

    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    spec = collect_registry(get_plugin_manager(load_entrypoints=False)).workload(workload).model
    features = torch.randn(batch, frames, 80)
    lengths = torch.full((batch,), frames)
    lengths[: batch // 4] = 3 * frames // 4
    print(f"| {workload} | layout | forward and backward ms (median of {repeats}) |")
    print("|---|---|---:|")
    for _ in range(2):
        for layout in LAYOUTS:
            conformer.Subsampling.CHANNELS_LAST = layout == "channels-last"
            torch.manual_seed(0)
            network = conformer.Conformer(spec, 80).train()
            times = []
            for _ in range(repeats + 1):
                started = time.perf_counter()
                network(features, lengths).sum().backward()
                times.append(1e3 * (time.perf_counter() - started))
            print(f"| | {layout} | {statistics.median(times[1:]):.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--frames", type=int, default=1670)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", metavar="WORKLOAD", help="time a Conformer workload's whole model instead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model:
        model_steps(args.model, args.batch, args.frames, args.repeats)
        return
    print(f"torch {torch.__version__}, {args.threads} threads, batch {args.batch} of {args.frames} frames x 80 bands")
    print("| convolution | precision | layout | forward ms | backward ms | both |")
    print("|---|---|---|---:|---:|---:|")
    for name, (channels_in, channels_out) in CONVOLUTIONS.items():
        # The first convolution's input is the padded features; the second's, the first's output.
        time_rows = args.frames + 2 if channels_in == 1 else (args.frames + 1) // 2 + 2
        frequency_rows = 80 + 2 if channels_in == 1 else 40 + 2
        for precision in ("fp32", "bf16"):
            for layout, memory_format in LAYOUTS.items():
                convolution = nn.Conv2d(channels_in, channels_out, 3, stride=2).to(memory_format=memory_format)
                inputs = torch.randn(args.batch, channels_in, time_rows, frequency_rows)
                inputs = inputs.contiguous(memory_format=memory_format).requires_grad_()
                forward, backward = timed(convolution, inputs, precision, args.repeats)
                print(f"| {name} | {precision} | {layout} | {forward:.0f} | {backward:.0f} "
                      f"| {forward + backward:.0f} |", flush=True)


if __name__ == "__main__":
    main()
