"""conformer-mini's training step, and the operations the parity matrix blames, in PyTorch,
TensorFlow and JAX alone: no benchbase code, each framework written as its own tutorials write
it, so that a gap between the backends can be shown to be the framework's (or ours).

    python benchmarks/standalone_conformer.py                                  # the step, then the operations
    python benchmarks/standalone_conformer.py --only step --steps 20
    python benchmarks/standalone_conformer.py --only ops --frameworks torch,jax --json standalone.json
    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184 python benchmarks/standalone_conformer.py --only step

The last keeps glibc's malloc from handing large freed blocks back to the system. PyTorch's CPU
allocator frees a tensor to malloc, which returns a block of 32 MiB or more to the system, so each
step's large activations and gradients (the subsampling's 51 MB output and its ReLU's, the
projection's input gradient) page-fault anew, about 20 ms apiece on a 2-core AMD EPYC; with the
setting PyTorch's page faults are gone. XLA's CPU runtime page-faults as much a step and keeps
most of them under it; TensorFlow's allocator keeps its memory. The tables count the minor page
faults a call (getrusage).

The model is conformer-mini's Conformer at its shapes (standalone/conformer_mini.py, each constant
beside the workload field it mirrors; tests/test_standalone_conformer.py holds them to the
registered workload): one 3x3 stride-2 convolution and ReLU, the flatten of (frequency, channel)
and a Linear to the encoder width, sinusoidal positions, dropout; blocks of half a feed-forward,
multi-head self-attention over each utterance's own keys, the convolution module (GLU, depthwise
convolution, BatchNorm, swish) and half a feed-forward, then LayerNorm; a Linear to the symbols,
CTC. It is written plainly: each framework's own LayerNorm and BatchNorm (over every frame of the
padded batch, not the backends' masked one), no per-frame masks but the attention's key mask, no
learned query scale: elementwise passes of the backends that this leaves out, while the matmuls,
convolutions, attention, CTC and the optimizer are the same work at the same shapes. One module a
framework (standalone/torch_conformer.py, tf_conformer.py, jax_conformer.py; their docstrings say
which of the framework's pieces each uses), each with its ``training_step`` and ``operations``.

Every framework runs on one compute thread (``one_thread``: torch.set_num_threads(1);
TensorFlow's intra- and inter-op pools of 1; XLA's Eigen multithreading off and its CPU client
created while the calling thread may run on one CPU, which XLA's threads inherit: the jax
backend's way, XLA having no flag for its pool's size), on one random batch (``BATCH`` utterances
padded to ``FRAMES``, each of its own length), the same in every framework.

``--only step``: a full training step (forward, CTC loss, backward, clipping, AdamW) after
``--warmup`` untimed steps each (the first one's seconds, tracing and compilation, are printed),
then ``--steps`` steps with the frameworks alternating in rotating order; the median ms, p25-p75,
the ratio to the fastest and the median page faults a step. ``--only ops``: each operation
alone, forward and backward (the gradients of its inputs and weights for a random cotangent) at
the model's shapes, ``--op-repeats`` calls in the same rotation: a table of median ms, the ratio
to the row's fastest and the page faults a call ("-": the framework has no such variant). Both by
default. The numbers go into docs/BENCHMARKS.md, "Framework parity: the matrix".
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the standalone/ folder beside this script

from standalone.conformer_mini import BATCH, FEATURES, FRAMES, OPERATIONS, Batch, random_batch
from standalone.timing import one_thread, time_rotating

FRAMEWORKS = ("torch", "tf", "jax")


def framework_module(name: str):
    """standalone/NAME_conformer.py: its ``training_step`` and ``operations``; imported only when
    asked for, after ``one_thread``."""
    return importlib.import_module(f"standalone.{name}_conformer")


def main() -> None:
    parser = _parser()
    arguments = parser.parse_args()
    frameworks = arguments.frameworks.split(",")
    unknown = [name for name in frameworks if name not in FRAMEWORKS]
    if unknown:
        parser.error(f"--frameworks: {', '.join(unknown)} not one of {', '.join(FRAMEWORKS)}")
    if arguments.steps < 2 or arguments.op_repeats < 2:
        parser.error("--steps and --op-repeats must be 2 or more (a p25-p75 needs two)")
    one_thread(frameworks)  # before any framework computes
    batch = random_batch(arguments.seed)
    result = {"cpu": _cpu_model(), "versions": _versions(frameworks), "batch": BATCH, "frames": FRAMES,
              "output_frames": int(batch.output_lengths.max()),
              "lengths": [int(batch.output_lengths.min()), int(batch.output_lengths.max())]}
    _print_heading(result)
    if arguments.only in (None, "step"):
        steps = {name: framework_module(name).training_step(batch, arguments.seed) for name in frameworks}
        result["step"] = time_rotating(steps, arguments.steps, arguments.warmup)
        _print_step(result["step"], arguments.steps)
    if arguments.only in (None, "ops"):
        result["operations"] = time_operations(frameworks, batch, arguments)
        _print_operations(result["operations"], frameworks, arguments.op_repeats)
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def time_operations(frameworks: list[str], batch: Batch, arguments) -> dict[str, dict]:
    """Operation -> framework -> its cell, each operation's frameworks timed in rotation."""
    built = {name: framework_module(name).operations(batch, arguments.seed) for name in frameworks}
    table = {}
    for operation in OPERATIONS:
        runners = {name: operations[operation] for name, operations in built.items() if operation in operations}
        if runners:
            table[operation] = time_rotating(runners, arguments.op_repeats, arguments.warmup)
    return table


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("step", "ops"), help="time only the step or only the operations")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated, of torch, tf, jax")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per framework (default: 20)")
    parser.add_argument("--op-repeats", type=int, default=30, help="timed calls per operation (default: 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls of each first (default: 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    return parser


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())


def _versions(frameworks: list[str]) -> dict[str, str]:
    modules = {"torch": ["torch"], "tf": ["tensorflow", "keras"], "jax": ["jax", "optax"]}
    return {module: importlib.import_module(module).__version__ for name in frameworks for module in modules[name]}


def _print_heading(result: dict) -> None:
    versions = ", ".join(f"{module} {version}" for module, version in result["versions"].items())
    print(f"{result['cpu']}; {versions}; one compute thread")
    print(f"batch {result['batch']} x {result['frames']} frames of {FEATURES} features, {result['output_frames']} "
          f"output frames (each row's {result['lengths'][0]}-{result['lengths'][1]})")


def _print_step(cells: dict[str, dict], steps: int) -> None:
    print(f"\ntraining step (forward, CTC, backward, clipping, AdamW), {steps} steps each, rotating")
    print(f"{'framework':<10}{'median ms':>11}{'p25-p75 ms':>16}{'ratio':>7}{'first step s':>14}{'page faults':>13}")
    for name, cell in cells.items():
        spread = f"{cell['p25_ms']:.1f}-{cell['p75_ms']:.1f}"
        print(f"{name:<10}{cell['median_ms']:>11.1f}{spread:>16}{cell['ratio']:>7.2f}{cell['first_s']:>14.2f}"
              f"{cell['page_faults']:>13}")


def _print_operations(table: dict[str, dict], frameworks: list[str], repeats: int) -> None:
    print(f"\noperations alone, forward and backward, median ms of {repeats} (ratio to the row's fastest; "
          "thousands of page faults a call)")
    width = max(len(operation) for operation in table) + 2
    print(f"{'operation':<{width}}" + "".join(f"{name:>24}" for name in frameworks))
    for operation, cells in table.items():
        print(f"{operation:<{width}}" + "".join(_operation_cell(cells.get(name)) for name in frameworks))


def _operation_cell(cell: dict | None) -> str:
    if cell is None:
        return f"{'-':>24}"
    return f"{cell['median_ms']:>9.2f} ({cell['ratio']:.2f}; {cell['page_faults'] / 1e3:4.1f}k)"


if __name__ == "__main__":
    main()
