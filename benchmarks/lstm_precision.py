"""One LSTM layer's forward and backward in fp32 and bf16 on this CPU, as the torch backend runs them.

    python benchmarks/lstm_precision.py [--units 1024] [--batches 2,16,32,64] [--frames 50] [--threads 2] [--repeats 5]

Every torch family's LSTMs go through ``benchbase_torch_ds2.mixed_lstm.lstm_outputs``: float32
in fp32, and under bf16 (a CPU autocast) bfloat16 copies of the weights on a bfloat16 input,
which oneDNN runs as its bf16 LSTM. Per batch size, on random inputs of ``--frames`` frames, the
two precisions alternate (fp32 first in odd repeats, bf16 first in even ones), and the table has
the median forward and backward milliseconds over ``--repeats`` after one warm-up pass of each.
The backward is of the outputs' float32 sum: the input's gradient and the weights'. Made to
explain why the full rnnt (1024-unit LSTMs) trains slower in bf16 than in fp32 at a small batch on
a CPU (docs/BENCHMARKS.md, "The transducer in bf16 on 2 CPU cores").
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from benchbase_torch_ds2.mixed_lstm import lstm_outputs
from torch import nn

PRECISIONS = ("fp32", "bf16")


def one_pass(lstm: nn.LSTM, inputs: torch.Tensor, precision: str) -> tuple[float, float]:
    """(forward ms, backward ms) of one pass, the gradients cleared first."""
    lstm.zero_grad(set_to_none=True)
    inputs.grad = None
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        outputs = lstm_outputs(lstm, inputs)
    middle = time.perf_counter()
    outputs.float().sum().backward()
    ended = time.perf_counter()
    return 1e3 * (middle - started), 1e3 * (ended - middle)


def timed(units: int, batch: int, frames: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Each precision's median (forward ms, backward ms), the precisions interleaved."""
    torch.manual_seed(0)
    lstm = nn.LSTM(units, units, batch_first=True)
    inputs = torch.randn(batch, frames, units, requires_grad=True)
    passes: dict[str, list[tuple[float, float]]] = {precision: [] for precision in PRECISIONS}
    for precision in PRECISIONS:  # warm-up: oneDNN creates its primitives
        one_pass(lstm, inputs, precision)
    for repeat in range(repeats):
        for precision in PRECISIONS if repeat % 2 == 0 else reversed(PRECISIONS):
            passes[precision].append(one_pass(lstm, inputs, precision))
    return {precision: (statistics.median(f for f, _ in runs), statistics.median(b for _, b in runs))
            for precision, runs in passes.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1024, help="input and hidden width (the full rnnt's: 1024)")
    parser.add_argument("--batches", default="2,16,32,64", help="comma-separated batch sizes")
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.units} units, {args.frames} frames, "
          f"median of {args.repeats}\n")
    print("| batch | fp32 forward ms | fp32 backward ms | bf16 forward ms | bf16 backward ms "
          "| bf16 / fp32 forward | bf16 / fp32 backward | bf16 / fp32 both |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for batch in (int(b) for b in args.batches.split(",")):
        medians = timed(args.units, batch, args.frames, args.repeats)
        (f32, b32), (f16, b16) = medians["fp32"], medians["bf16"]
        print(f"| {batch} | {f32:.1f} | {b32:.1f} | {f16:.1f} | {b16:.1f} | {f16 / f32:.2f} | {b16 / b32:.2f} "
              f"| {(f16 + b16) / (f32 + b32):.2f} |", flush=True)


if __name__ == "__main__":
    main()
