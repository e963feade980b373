"""Error bounds of the transducer family's pieces, for comparing a backend with the NumPy reference.

Worst-case first-order bounds from the error model's rules (``benchbase.testing.tolerances``),
shared by every backend's rnnt tests: the gradient of the transducer loss with respect to the
lattice, and the joint network's log-probabilities.
"""

from __future__ import annotations

import numpy as np

from benchbase.testing.tolerances import ELEMENTWISE_ULPS, FLOAT32_UNIT_ROUNDOFF, accumulation_bound

__all__ = ["joint_bound", "transducer_gradient_bound"]


def transducer_gradient_bound(gradient, losses, steps, unit_roundoff):
    """A gradient entry is -exp(x), x = alpha + log p + beta - log P, each term from a recursion of at
    most ``steps`` log-add-exps, so |dx| <= (ELEMENTWISE_ULPS + 2) u steps (|alpha| + |log p| + |beta| +
    |log P|). The three terms are log-probabilities (<= 0) summing to log P + log|g|, so the sum of
    magnitudes is 2 |log P| + |log|g||, and the entry moves by |g| (|dx| + the exp's own ulps). Autodiff
    through the forward recursion reaches the same entry as a product of each step's local weights
    exp(a - logaddexp(a, b)), whose arguments carry the same roundings of the alphas."""
    magnitude = np.abs(gradient)
    log_likelihood = np.abs(np.where(np.isinf(losses), 0.0, losses))[:, None, None, None]
    with np.errstate(divide="ignore"):
        log_magnitude = np.where(magnitude > 0, np.abs(np.log(np.where(magnitude > 0, magnitude, 1.0))), 0.0)
    exponent = (ELEMENTWISE_ULPS + 2) * unit_roundoff * steps[:, None, None, None] * (2 * log_likelihood
                                                                                      + log_magnitude)
    # expm1(|dx|) <= 2 |dx| while |dx| < 1; the floor: a float32 entry that underflows to a subnormal
    return magnitude * (2 * exponent + ELEMENTWISE_ULPS * unit_roundoff) + np.finfo(np.float32).tiny


def joint_bound(weights, encoded, predicted):
    """One float32 side's error bound of ``reference.joint``, worst case per operation and carried
    forward by each step's Lipschitz constant (rules 2 to 4 of the error model, first order):
    rounding_bound's random signs can cancel within one element, which a worst case cannot."""
    u = FLOAT32_UNIT_ROUNDOFF
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    kernel, bias = w["joint.prediction.kernel"], w["joint.prediction.bias"]
    projected = predicted @ kernel + bias
    projected_error = accumulation_bound(kernel.shape[0] + 1) * (np.abs(predicted) @ np.abs(kernel) + np.abs(bias))
    before = encoded[:, :, None, :] + projected[:, None, :, :]
    hidden = np.maximum(before, 0.0)  # ReLU moves nothing by more than its input moved
    hidden_error = u * np.abs(before) + projected_error[:, None, :, :]
    kernel, bias = w["joint.output.kernel"], w["joint.output.bias"]
    logits = hidden @ kernel + bias
    logits_error = (accumulation_bound(kernel.shape[0] + 1) * (np.abs(hidden) @ np.abs(kernel) + np.abs(bias))
                    + hidden_error @ np.abs(kernel))
    # z_k - logsumexp(z) moves by at most z_k's move plus the largest one; then its own roundings:
    # the shift, each exp, the sum of the symbols (relative), the log, the subtraction.
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    own = (u * (np.abs(shifted - log_total) + 2 * np.abs(shifted).max(axis=-1, keepdims=True))
           + accumulation_bound(logits.shape[-1]) + (ELEMENTWISE_ULPS + 1) * u * (1 + np.abs(log_total)))
    return logits_error + logits_error.max(axis=-1, keepdims=True) + own
