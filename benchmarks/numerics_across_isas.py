"""How far each backend's float32 results land from benchbase's float64 reference, per CPU ISA.

The conformance kit's comparisons (forward pass, first loss, BatchNorm statistics, the int8
path's forward and ranges) on the kit's data and random weights, measured once per backend
and per instruction-set cap (``benchbase.testing.isa``), each in a fresh interpreter so that
the caps take effect before a framework starts. It prints the measured error beside the
bound that ``benchbase.numerics.tolerances`` derives for it, so the margin of every bound is
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
from benchbase.kit.conformance import resolve_backend
from benchbase.testing.isa import active_isa
from benchbase.kit.core import Kit
from benchbase.kit.data import load_kit_data
from benchbase.kit.model_rules import valid_frames
from benchbase.kit.int8 import flip_bound, median_bound, quantized_forward, quantized_training_step
from benchbase.families.ds2.reference import batchnorm_names, bounded_reference
from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF

def margin(found, bound):  # the smallest bound / |difference| over the compared elements
    found, bound = np.ravel(found), np.ravel(bound)
    return float(np.min(bound / np.maximum(found, 1e-30)))

name = sys.argv[1]
data = load_kit_data()
backend_class = resolve_backend(name)
kit = Kit(backend_class, data)
out = {"backend": name, "isa": active_isa(name)}
weights = kit.parity_weights()
inputs = data.impossible_batch.inputs()
with kit.backend() as backend:
    backend.import_weights(weights)
    found = backend.predict(inputs)
reference = bounded_reference(weights, kit.model, inputs.features, inputs.feature_lengths, training=False)
mask = np.broadcast_to(valid_frames(inputs, reference.log_probs.shape[1]), reference.log_probs.shape)
difference = np.abs(found[:, :reference.log_probs.shape[1]] - reference.log_probs)[mask]
out["forward"] = float(difference.max())
out["forward_margin"] = margin(difference, reference.log_probs_bound[mask])
step = kit.first_step()
out["loss_relative"] = abs(step.loss - step.reference.loss) / abs(step.reference.loss)
out["loss_margin"] = step.reference.loss_bound / max(abs(step.loss - step.reference.loss), 1e-30)
running, bounds = [], []
for prefix in batchnorm_names(kit.model):
    for stat in ("mean", "variance"):
        key = f"{prefix}.{stat}"
        running.append(np.abs(step.weights_after[key] - step.reference.running[key]))
        update = 4 * FLOAT32_UNIT_ROUNDOFF * np.maximum(np.abs(step.weights_after[key]),
                                                        np.abs(step.weights_before[key]))
        bounds.append(step.reference.running_bound[key] + update)  # as the rule allows it
out["running_margin"] = margin(np.concatenate(running), np.concatenate(bounds))
result = quantized_forward(backend_class, data)
diff = np.abs(result.found - result.expected)[np.broadcast_to(result.mask, result.found.shape)]
out["int8_forward_max"], out["int8_flip_bound"] = float(diff.max()), flip_bound(result)
out["int8_forward_median"], out["int8_median_bound"] = float(np.median(diff)), median_bound(result)
for first in (True, False):
    ranges = quantized_training_step(backend_class, data, first=first)
    got, want, bound = ranges.ranges, ranges.expected_ranges, ranges.range_bounds
    key = "ranges_first" if first else "ranges_moving"
    out[key] = max(abs(got[k] - want[k]) / want[k] for k in want)
    out[key + "_margin"] = min(bound[k] / max(abs(got[k] - want[k]), 1e-30) for k in want if bound[k] > 0)
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
