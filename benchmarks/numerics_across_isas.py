"""How far each backend's float32 results land from benchbase's float64 reference, per CPU ISA.

The conformance kit's comparisons (forward pass, first loss, BatchNorm statistics, the int8
path's forward and ranges) on the kit's data and random weights, measured once per backend
and per instruction-set cap (``benchbase.testing.isa``), each in a fresh interpreter so that
the caps take effect before a framework starts. It prints the measured error beside the
bound that ``benchbase.testing.tolerances`` derives for it, so the margin of every bound is
on record (docs/BENCHMARKS.md, "Numerics across instruction sets").

    python benchmarks/numerics_across_isas.py [--backends torch tf jax] [--isas native avx2 sse4.1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

MEASURE = r"""
import json, sys
import numpy as np
from benchbase.testing.conformance import resolve_backend
from benchbase.testing.isa import active_isa
from benchbase.testing.kit import Kit
from benchbase.testing.kit_data import load_kit_data
from benchbase.testing.model_rules import valid_frames
from benchbase.testing.precision import quantized_forward, quantized_ranges_after_step
from benchbase.testing.reference_model import reference_forward, batchnorm_names
from benchbase.testing import tolerances

name = sys.argv[1]
data = load_kit_data()
backend_class = resolve_backend(name)
kit = Kit(backend_class, data)
out = {"backend": name, "isa": active_isa(name)}
weights = kit.parity_weights()
inputs = data.impossible_batch.inputs()
with kit.backend() as backend:
    backend.import_weights(weights)
    found, _ = backend.predict(inputs)
expected, _ = reference_forward(weights, kit.model, inputs.features, inputs.feature_lengths, training=False)
mask = np.broadcast_to(valid_frames(inputs, expected.shape[1]), expected.shape)
out["forward"] = float(np.abs(found[:, :expected.shape[1]] - expected)[mask].max())
out["forward_bound"] = tolerances.forward_log_probs(kit.model, data.feature_dimension)
step = kit.first_step()
out["loss_rel"] = abs(step.loss - step.reference_loss) / abs(step.reference_loss)
out["loss_bound"] = tolerances.ctc_loss(kit.model, data.feature_dimension)
worst = 0.0
for prefix in batchnorm_names(kit.model):
    for stat in ("mean", "variance"):
        new = step.weights_after[f"{prefix}.{stat}"].astype(np.float64)
        ref = step.reference_running[f"{prefix}.{stat}"]
        worst = max(worst, float(np.abs(new - ref).max() / np.abs(ref).max()))
out["running_rel"] = worst
q_found, q_expected, q_mask = quantized_forward(backend_class, data)
diff = np.abs(q_found - q_expected)[np.broadcast_to(q_mask, q_found.shape)]
out["int8_forward_max"], out["int8_forward_median"] = float(diff.max()), float(np.median(diff))
for first in (True, False):
    got, want = quantized_ranges_after_step(backend_class, data, first=first)
    out["ranges_rel_" + ("first" if first else "moving")] = max(abs(got[k] - want[k]) / want[k] for k in want)
print(json.dumps(out))
"""


def measure(backend: str, isa: str) -> dict:
    from benchbase.testing.isa import isa_environment

    process = subprocess.run([sys.executable, "-c", MEASURE, backend], env=isa_environment(isa),
                             capture_output=True, text=True, check=False)
    if process.returncode != 0:
        raise SystemExit(f"{backend} under {isa}: {process.stderr.strip().splitlines()[-1]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["torch", "tf", "jax"])
    parser.add_argument("--isas", nargs="+", default=["native", "avx2", "sse4.1"])
    args = parser.parse_args()
    for backend in args.backends:
        for isa in args.isas:
            print(json.dumps(measure(backend, isa)), flush=True)


if __name__ == "__main__":
    main()
