"""Numerical tolerances from an error model: how far two correct computations may land apart.

Every numerical comparison in the conformance kit and in benchbase's tests takes its
tolerance from here, so that a bound is derived once, with its reason, instead of tuned on
one CPU. A tolerance tuned on one machine passes there and fails on the next: oneDNN, XLA
and ATen pick other kernels on an AVX-512 CPU than on an AVX2 one (16-wide instead of 8-wide
FMAs, other GEMM blockings, other vectorized exp and tanh), and every kernel adds its terms
in its own order. The model (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
ed., chapters 2 and 3):

1. **Unit roundoff.** Each float32 operation is exact up to a relative error of at most
   u = 2^-24 (``FLOAT32_UNIT_ROUNDOFF``).
2. **Accumulations.** A sum or dot product of n terms, added in *any* order, is off the
   exact value by at most gamma_n * sum|terms|, gamma_n = n u / (1 - n u)
   (``accumulation_bound``). Another kernel, ISA or device is another order inside that
   bound. The error is relative to the sum of the terms' magnitudes, not to the result:
   where terms cancel, the relative error of the result is larger by the condition number
   sum|terms| / |sum terms|, which is why the bounds below take magnitudes from the data.
3. **Elementwise functions.** exp, log, tanh and sigmoid come from vector math libraries,
   with other approximations per ISA and inside fused kernels (an LSTM's gates): each is off
   by at most ``ELEMENTWISE_ULPS`` u, relative, as measured (benchmarks/elementwise_ulps.py).
4. **Propagation.** A network carries an error made in one layer through every later one,
   amplified or damped by their Jacobians, and an LSTM carries it on through the frames
   that follow. No closed form gives those factors for given weights and inputs, so the
   float64 reference computes them: ``rounding_bound`` runs the reference twice, once as is
   and once with every accumulation and every elementwise function moved by its bound from
   rules 2 and 3 (each element by its full bound, with a seeded random sign, since rounding
   errors have no preferred direction), and reports how far the outputs moved, the largest
   movement over ``INJECTION_DRAWS`` draws. Per operation the injected error is the worst
   case (an n-term dot product's actual error is about sqrt(n) times smaller), so the bound
   has room for correlated errors that a random sign does not model. An output's movement in
   one draw is a sum of many signed terms, which may cancel: the draws are enough that no
   output's bound is small by chance.
5. **Two float32 results.** A backend against the float64 reference has one side's error;
   two float32 computations (two backends, one replica against two) have two:
   ``BOTH_SIDES`` = 2.
6. **Optimizer steps compound.** After a step the two sides hold different weights, and the
   next forward pass, gradient and update carry that difference on: training is a
   dynamical system, and a small difference grows by a factor per step (its largest
   Lyapunov exponent) that depends on the loss surface and cannot be derived a priori.
   AdaDelta's update itself does not amplify: at its first step, d/dg of
   sqrt(eps) g / sqrt((1 - rho) g^2 + eps) is at most 1, so a gradient's rounding moves an
   update by no more than itself. ``STEP_GROWTH`` is the growth per step, measured on the
   ds2-mini data-parallel runs under three instruction sets (docs/BENCHMARKS.md, "Numerics
   across instruction sets") and taken with a margin; ``after_steps`` applies it. After many
   steps such a bound says little: the first step's comparisons are the strict ones.

What these bounds must still catch (each re-planted and seen to fail; docs/design.md,
"Tolerances"): the unbiased BatchNorm variance (a factor 1 + 1/(N - 1) on N frames),
per-replica BatchNorm statistics, a wrong padding or convolution window, and a wrong CTC
reduction: each is orders of magnitude above the rounding bound of the same quantity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "BFLOAT16_UNIT_ROUNDOFF",
    "BOTH_SIDES",
    "ELEMENTWISE_ULPS",
    "FLOAT32_UNIT_ROUNDOFF",
    "FLOAT64_UNIT_ROUNDOFF",
    "INJECTION_DRAWS",
    "STEP_GROWTH",
    "RoundingModel",
    "accumulation_bound",
    "after_steps",
    "ctc_recursion_bound",
    "ctc_recursion_bounds",
    "rounding_bound",
    "same_kernels",
]

FLOAT32_UNIT_ROUNDOFF = 2.0**-24
"""u: float32 keeps 24 significant bits, so rounding to nearest is off by at most half an ulp."""
FLOAT64_UNIT_ROUNDOFF = 2.0**-53
"""float64 keeps 53 significant bits."""
BFLOAT16_UNIT_ROUNDOFF = 2.0**-8
"""bfloat16 keeps 8 significant bits."""
ELEMENTWISE_ULPS = 16
"""Relative error of a vectorized exp, log, tanh or sigmoid, in units of u: each counts as this many
roundings. Measured against float64 on 393k points of each function's range (benchmarks/
elementwise_ulps.py; docs/BENCHMARKS.md, "What a vector function costs, measured"): at most 12.6 u
(oneDNN's SSE4.1 sigmoid inside torch's CPU LSTM; 4.7 under AVX2 and AVX-512), 8.2 u (Eigen's
sigmoid, TensorFlow's BlockLSTMV2 included), 6.4 u (XLA's tanh under SSE4.1), 2 u or less for
ATen's own functions. Taken as 16; tests/test_elementwise_error.py holds every framework here to it."""
BOTH_SIDES = 2
"""Two float32 computations each within a bound of the exact value differ by up to twice it."""
STEP_GROWTH = 1.5
"""Growth per optimizer step of a difference between two runs of the same training (rule 6).
Measured as the smallest growth under which every step's loss difference and the final weights'
distance (as a share of how far training moved them) stay within the first loss's bound
compounded: 0.94 to 1.14 for PyTorch on 1 vs 2 ranks over 20 ds2-mini steps under AVX-512,
AVX2 and SSE4.1 kernels (benchmarks/step_growth.py), 1.15 for TensorFlow on 1 vs 2 replicas
over 10 steps (plugins/tf_ds2/tests/test_tf_distributed.py); docs/BENCHMARKS.md, "Numerics across instruction
sets". Taken as 1.5, which over 10 steps allows 5.6 times what 1.15 would."""
DETERMINISTIC_ULPS = 16
"""Roundings allowed between two runs of the same kernels (``same_kernels``)."""
INJECTION_DRAWS = 16
"""Random-sign draws of ``rounding_bound``; the largest movement is the bound. With 3, an element in a
thousand of the kit's forward_parity outputs had a bound under 9% of its frame's median, and on a
CPU the backends came closest to their bound (0.08-0.28 of it) at such elements; with 16, one in a
thousand is under 34-39% and the closest is 0.010-0.018 of its bound (docs/BENCHMARKS.md, "The
rounding bound's draws"). A draw costs one more float64 forward pass of the reference."""


def accumulation_bound(terms: int, unit_roundoff: float = FLOAT32_UNIT_ROUNDOFF) -> float:
    """gamma_n: the worst-case error of an n-term sum or dot product in any order, relative to
    the sum of the terms' magnitudes (Higham, Lemma 3.1 and eq. 3.4)."""
    if terms < 1:
        raise ValueError(f"an accumulation has at least one term, got {terms}")
    product = terms * unit_roundoff
    if product >= 1:
        raise ValueError(f"{terms} terms exceed what gamma_n bounds at unit roundoff {unit_roundoff:g}")
    return product / (1 - product)


def after_steps(first_step_bound: float, steps: int, growth: float = STEP_GROWTH) -> float:
    """The bound on a difference that started at ``first_step_bound`` after ``steps`` more
    optimizer steps: each step adds a fresh rounding of the same size and multiplies what was
    there by ``growth`` (a geometric sum)."""
    if steps < 0:
        raise ValueError(f"steps must be at least 0, got {steps}")
    return first_step_bound * sum(growth**k for k in range(steps + 1))


def ctc_recursion_bound(output_lengths: np.ndarray, losses: np.ndarray,
                        unit_roundoff: float = FLOAT32_UNIT_ROUNDOFF) -> float:
    """The rounding a float32 CTC recursion adds to a batch's mean loss: a log-add-exp per frame
    (ELEMENTWISE_ULPS + 2 roundings) of a value that grows to the utterance's loss. Impossible
    alignments (infinite loss) count zero. What the log-probabilities' own errors make of the
    loss, ``rounding_bound`` finds by computing the loss from the moved log-probabilities."""
    return float(ctc_recursion_bounds(output_lengths, losses, unit_roundoff).sum() / max(len(losses), 1))


def ctc_recursion_bounds(output_lengths: np.ndarray, losses: np.ndarray,
                         unit_roundoff: float = FLOAT32_UNIT_ROUNDOFF) -> np.ndarray:
    """Per utterance, ``ctc_recursion_bound``'s rounding (0 where the alignment is impossible)."""
    possible = np.isfinite(losses)
    return (ELEMENTWISE_ULPS + 2) * unit_roundoff * np.asarray(output_lengths) * np.abs(np.where(possible, losses, 0.0))


def same_kernels(magnitude: float | np.ndarray) -> float:
    """Bound between two runs of the *same* backend on the same machine and inputs (a checkpoint
    restored, a seed repeated, a fresh instance with the same weights): they run the same
    kernels in the same order, and float arithmetic is deterministic, so they agree bit for
    bit. What is allowed is a handful of roundings of the values' magnitude
    (``DETERMINISTIC_ULPS``): a value stored to float32 and read back, a graph re-traced with a
    multiply-add fused or not."""
    return float(DETERMINISTIC_ULPS * FLOAT32_UNIT_ROUNDOFF * np.max(np.abs(magnitude)))


@dataclass
class RoundingModel:
    """Moves each intermediate result of the reference by its rounding bound (rules 2 and 3).

    The reference calls ``accumulation`` after every dot product or sum and ``elementwise``
    after every vector function; with no model (``None``) it computes as is. Signs come from
    a seeded generator, so one seed always moves the same elements the same way.
    """

    seed: int = 0
    unit_roundoff: float = FLOAT32_UNIT_ROUNDOFF
    """Of the accumulators and of vector functions."""
    operand_roundoff: float = 0.0
    """Of each operand rounded to a narrower type before it is multiplied or stored (bfloat16
    mixed precision: ``BFLOAT16_UNIT_ROUNDOFF``; 0 for float32 throughout)."""
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def accumulation(self, value: np.ndarray, magnitude: np.ndarray, terms: int) -> np.ndarray:
        """``value`` (an n-term accumulation whose terms' magnitudes sum to ``magnitude``), moved."""
        # Both factors of each product rounded to the operand type, then accumulated.
        relative = 2 * self.operand_roundoff + accumulation_bound(terms, self.unit_roundoff)
        return value + self._signs(value) * relative * magnitude

    def elementwise(self, value: np.ndarray, operations: int = 1) -> np.ndarray:
        """``value`` after ``operations`` vector functions or roundings, moved."""
        relative = operations * (ELEMENTWISE_ULPS * self.unit_roundoff + self.operand_roundoff)
        return value + self._signs(value) * relative * np.abs(value)

    def _signs(self, value: np.ndarray) -> np.ndarray:
        return self.rng.choice(np.array([-1.0, 1.0]), size=np.shape(value))


def rounding_bound(compute, draws: int = INJECTION_DRAWS, operand_roundoff: float = 0.0
                   ) -> tuple[Mapping[str, np.ndarray], dict[str, np.ndarray]]:
    """(the outputs of ``compute(None)``, per output the largest movement the injected roundings
    caused, elementwise). ``compute(rounding)`` returns a mapping of named arrays and runs once
    with ``None`` and once per draw with a ``RoundingModel``. The movement is one float32
    side's bound on each output (with ``operand_roundoff``, one mixed-precision side's)."""
    exact: Mapping[str, np.ndarray] = compute(None)
    worst = {name: np.zeros(np.shape(value)) for name, value in exact.items()}
    for draw in range(draws):
        moved = compute(RoundingModel(seed=draw, operand_roundoff=operand_roundoff))
        for name, value in exact.items():
            with np.errstate(invalid="ignore"):  # inf - inf: an impossible alignment, no movement
                movement = np.abs(np.asarray(moved[name], np.float64) - np.asarray(value, np.float64))
            worst[name] = np.maximum(worst[name], np.where(np.isfinite(movement), movement, 0.0))
    return exact, worst
