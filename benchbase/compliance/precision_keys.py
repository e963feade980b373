"""MLPerf Training's lowest-numerical-precision keys (optional since 6.0), from the run's
precision and training strategy: what the log states and what `benchbase check` expects.

mlperf-logging's own values name the arithmetic (fp32, tf32, bf16, fp16, int8, ...). The linear
and attention layers compute in the run's precision: under bf16 and fp16 the framework's mixed
precision casts both to it, and int8-emulated fake-quantizes their operands to int8's grid (in
float32 arithmetic), so the lowest precision of their values is int8's. A family without
attention (ds2, rnnt) states the same value for attention: the precision it would compute in.
The communication key is the strategy's (``StrategySpec.communication_precision``): float32
gradients under every mixed precision, which keeps float32 master weights, unless the strategy
casts them (fp16_compress, bf16_compress)."""

from __future__ import annotations

from benchbase.compliance.keys import constants
from benchbase.specs.strategy import communication_precision_of

__all__ = ["LOWEST_PRECISION_KEYS", "lowest_numerical_precisions"]

LOWEST_PRECISION_KEYS = (constants.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, constants.LOWEST_NUMERICAL_PRECISION_IN_ATTN,
                         constants.LOWEST_NUMERICAL_PRECISION_IN_COMM)
_LAYER_PRECISION = {"int8-emulated": "int8"}
"""A run precision whose layers' lowest precision has another name; any other is its own."""


def lowest_numerical_precisions(precision: str, strategy: str) -> dict[str, str | None]:
    """Each key's value for a run in ``precision`` under the strategy named ``strategy`` (None: a
    strategy not installed here, whose communication is unknown)."""
    layers = _LAYER_PRECISION.get(precision, precision)
    linear, attention, communication = LOWEST_PRECISION_KEYS
    return {linear: layers, attention: layers, communication: communication_precision_of(strategy)}
