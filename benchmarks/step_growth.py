"""How fast a rounding-sized difference between two trainings grows: the error model's STEP_GROWTH.

Trains ds2-mini's PyTorch backend on the same global batches once in one process and once in
two (torchrun, gloo; each rank its half of every batch, BatchNorm over the global batch), as
tests/test_distributed.py does, under each CPU ISA cap (``benchbase.testing.isa``). The two
runs differ only in the order float32 sums are added, so the difference of their losses at
step k, relative to the first step's rounding bound b (``bounded_step``, both sides), shows the
growth: the smallest G with |loss_k(1) - loss_k(2)| / loss_k <= b * (1 + G + ... + G^k) for
every k, and with the final weights' distance as a share of how far training moved them
within b * (1 + ... + G^(N-1)).

    python benchmarks/step_growth.py --store STORE [--steps 20] [--isas native avx2 sse4.1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchbase.numerics.tolerances import after_steps
from benchbase.testing.isa import isa_environment

WORKER = Path(__file__).resolve().parent.parent / "tests" / "workers" / "ddp_equivalence.py"


def train(processes: int, store: Path, out: Path, steps: int, isa: str) -> tuple[dict, dict, dict]:
    environment = {**isa_environment(isa), "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": str(WORKER.parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out.mkdir(parents=True)
    finished = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc-per-node={processes}", str(WORKER), str(store), str(out), str(steps)],
                              env=environment, capture_output=True, text=True)
    if finished.returncode != 0:
        raise SystemExit(f"{processes} process(es) under {isa}: {finished.stderr.strip().splitlines()[-1]}")
    return (json.loads((out / "losses.json").read_text()), dict(np.load(out / "weights.npz")),
            dict(np.load(out / "initial.npz")))


def smallest_growth(relative: np.ndarray, drift_share: float, first: float) -> float:
    """The smallest G (to 0.01) under which every step's difference and the drift are within the bound."""
    def covered(growth: float) -> bool:
        steps_ok = all(relative[k] <= after_steps(first, k, growth) for k in range(len(relative)))
        return steps_ok and drift_share <= after_steps(first, len(relative) - 1, growth)

    growth = 0.0
    while not covered(growth):
        growth += 0.01
    return round(growth, 2)


def measure(store: Path, steps: int, isa: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        (one, one_weights, initial), (two, two_weights, _) = (
            train(processes, store, Path(folder) / str(processes), steps, isa) for processes in (1, 2))
    losses_one, losses_two = np.array(one["losses"]), np.array(two["losses"])
    relative = np.abs(losses_one - losses_two) / np.abs(losses_one)
    moved = np.sqrt(sum(np.sum((one_weights[n] - initial[n]) ** 2) for n in one_weights))
    drift = np.sqrt(sum(np.sum((two_weights[n] - one_weights[n]) ** 2) for n in one_weights))
    first = one["first_loss_bound"]
    return {"isa": isa, "first_loss_bound": first, "relative": [float(f"{r:.3g}") for r in relative],
            "drift_share": float(drift / moved), "growth_needed": smallest_growth(relative, drift / moved, first)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a ds2-mini feature store (benchbase prepare)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--isas", nargs="+", default=["native", "avx2", "sse4.1"])
    args = parser.parse_args()
    for isa in args.isas:
        print(json.dumps(measure(args.store, args.steps, isa)), flush=True)


if __name__ == "__main__":
    main()
