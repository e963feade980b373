"""How close each backend comes to the kit's forward_parity bounds, per elementwise term and draws.

The kit compares predict() with the float64 reference element by element, each element within its
own bound: the largest movement of that element over ``draws`` random-sign injections of the error
model's roundings (``benchbase.numerics.tolerances``). One draw's movement is a sum of signed terms
that can cancel, so with few draws a few bounds are small by chance. For each backend and family,
on the kit's parity weights and small batch, this prints the largest difference / bound, that
element's bound as a share of its frame's median bound, the share of elements whose bound is
under a quarter of their frame's median, the 0.1% quantile of bounds over their frame's median and
the largest difference over its frame's median (docs/BENCHMARKS.md, "The rounding bound's draws"):

    python benchmarks/rounding_draws.py --ulps 4 --draws 3       # the model before it was measured
    python benchmarks/rounding_draws.py                          # the model's own (16 u, 16 draws)
    python benchmarks/rounding_draws.py --int8 torch --draws 3   # the RNN-T int8 encoder rule's bounds

``--int8 BACKEND`` prints instead the two bounds of the kit's RNN-T ``int8_forward`` rule, which are
aggregates over the valid outputs (the largest per-element bound, the median one) rather than one
bound per element, at ``--draws``, and how close the backend came to each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchbase from this checkout

import benchbase.families.rnnt.bounds as rnnt_bounds
import benchbase.kit.outputs as kit_outputs
import benchbase.numerics.tolerances as tolerances
from benchbase.kit.conformance import resolve_backend
from benchbase.kit.core import Kit
from benchbase.kit.data import load_kit_data
from benchbase.kit.outputs import check_outputs, valid_frames

SMALL_SHARE = 0.25


def measure(backend: str, family: str, draws: int) -> dict[str, float]:
    kit = Kit(resolve_backend(backend), load_kit_data(family=family))
    weights, inputs = kit.parity_weights(), kit.data.small_inputs
    with kit.backend() as instance:
        instance.import_weights(weights)
        outputs = check_outputs("forward_parity", instance.predict(inputs), inputs, kit)
    exact, bound = kit.parts.bounded_outputs(weights, kit.model, inputs.features, inputs.feature_lengths,
                                             operand_roundoff=0.0, draws=draws)
    frames = int(inputs.output_lengths.max(initial=0))
    bound, difference = bound[:, :frames], np.abs(outputs[:, :frames] - exact[:, :frames])
    valid = np.broadcast_to(valid_frames(inputs, frames), bound.shape)
    frame_median = np.median(bound, axis=-1, keepdims=True)
    of_median = (bound / frame_median)[valid]
    ratio = (difference / bound)[valid]
    closest = int(np.argmax(ratio))
    return {"closest": float(ratio[closest]), "its_bound_of_median": float(of_median[closest]),
            "small_bounds": float(np.mean(of_median < SMALL_SHARE)),
            "bound_quantile": float(np.quantile(of_median, 0.001)),
            "largest_difference_of_median": float(np.max((difference / frame_median)[valid]))}


def int8_rnnt(backend: str, draws: int) -> dict[str, float]:
    """The RNN-T int8 encoder rule's flip and median bounds at ``draws``, and the backend's differences."""
    import benchbase.kit.int8 as int8

    int8.INJECTION_DRAWS = draws  # read by name when the rule computes its bounds
    result = int8.quantized_forward(resolve_backend(backend), load_kit_data(family="rnnt"))
    flip_bound, median_bound = int8.flip_bound, int8.median_bound
    difference = np.abs(result.found - result.expected)[np.broadcast_to(result.mask, result.bound.shape)]
    return {"flip_bound": flip_bound(result), "median_bound": median_bound(result),
            "largest": float(difference.max()), "median": float(np.median(difference))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ulps", type=float, default=tolerances.ELEMENTWISE_ULPS, help="the elementwise term, in u")
    parser.add_argument("--draws", type=int, default=tolerances.INJECTION_DRAWS)
    parser.add_argument("--backends", nargs="+", default=["torch", "jax", "tf"])
    parser.add_argument("--families", nargs="+", help="default: every family the backend declares")
    parser.add_argument("--int8", metavar="BACKEND", help="the RNN-T int8 encoder rule's bounds instead")
    args = parser.parse_args()
    if args.int8:
        r = int8_rnnt(args.int8, args.draws)
        print(f"{args.int8} rnnt int8-emulated, {args.draws} draws: flip bound {r['flip_bound']:.4g} (largest "
              f"difference {r['largest']:.3g}, {r['largest'] / r['flip_bound']:.2g} of it), median bound "
              f"{r['median_bound']:.4g} (median difference {r['median']:.3g}, "
              f"{r['median'] / r['median_bound']:.2g} of it)")
        return
    for module in (tolerances, kit_outputs, rnnt_bounds):  # each reads the term by name
        module.ELEMENTWISE_ULPS = args.ulps
    print(f"{args.ulps:g} u, {args.draws} draws")
    print("| backend, family | difference / bound, closest element (its bound / its frame's median) "
          f"| elements with a bound under {SMALL_SHARE:g} of their frame's median | 0.1% quantile of bound / "
          "frame's median | largest difference / frame's median |")
    print("|---|---|---:|---:|---:|")
    for backend in args.backends:
        for family in args.families or sorted(resolve_backend(backend).capabilities.families):
            r = measure(backend, family, args.draws)
            print(f"| {backend} {family} | {r['closest']:.3f} ({r['its_bound_of_median']:.3f}) "
                  f"| {100 * r['small_bounds']:.2f}% | {r['bound_quantile']:.3f} "
                  f"| {r['largest_difference_of_median']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
