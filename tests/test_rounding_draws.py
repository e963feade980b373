"""The rounding bound's draws are enough that no output's bound is small by chance.

``rounding_bound`` moves every operation of the float64 reference by its rounding bound with a
random sign and takes, per output, the largest movement over ``INJECTION_DRAWS`` draws. One draw's
movement of an output is a sum of many signed terms, and sums cancel: with three draws an element
in a thousand of the kit's outputs had a bound under a tenth of its frame's median, and those were
the elements where the backends came closest to their bounds (docs/BENCHMARKS.md, "The rounding
bound's draws"). The outputs of one frame share their inputs and their scale, so a bound far
below its frame's median is the draws' chance, not the arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchbase.families.parts import family_parts
from benchbase.kit.data import load_kit_data
from benchbase.kit.outputs import valid_frames
from benchbase.numerics.tolerances import INJECTION_DRAWS
from benchbase.specs.model import model_families

pytestmark = pytest.mark.numerics

SMALL_SHARE = 0.25
"""A bound under a quarter of its frame's median counts as small: under the model's Gaussian sums a
largest of 16 draws falls there for about 2e-7 of the outputs, a largest of 3 for 2%."""


def small_bound_share(family: str, draws: int) -> float:
    data = load_kit_data(family=family)
    inputs, model = data.small_inputs, data.model
    weights = family_parts(model).random_weights(model, data.feature_dimension, seed=1)  # the kit's parity weights
    _, bound = family_parts(model).bounded_outputs(weights, model, inputs.features, inputs.feature_lengths,
                                                   operand_roundoff=0.0, draws=draws)
    frames = int(inputs.output_lengths.max(initial=0))
    bound = bound[:, :frames]
    relative = bound / np.median(bound, axis=-1, keepdims=True)
    return float(np.mean(relative[np.broadcast_to(valid_frames(inputs, frames), bound.shape)] < SMALL_SHARE))


@pytest.mark.parametrize("family", model_families())
def test_at_most_one_output_in_a_thousand_has_a_bound_small_by_chance(family):
    assert small_bound_share(family, INJECTION_DRAWS) <= 1e-3


def test_three_draws_leave_bounds_small_by_chance():
    """What the test above catches: the bounds of three draws (the model's earlier count)."""
    assert small_bound_share("ds2", 3) > 1e-3
