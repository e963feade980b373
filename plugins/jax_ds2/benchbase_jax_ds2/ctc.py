"""The CTC families' loss in JAX (ds2, the Conformer): each utterance's CTC loss, as the spec pins it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from benchbase.specs import ModelSpec

__all__ = ["ctc_per_utterance", "mean_over_rows"]


def ctc_per_utterance(spec: ModelSpec, log_probs: jax.Array, output_lengths: jax.Array, labels: jax.Array,
                      label_lengths: jax.Array) -> jax.Array:
    """Each utterance's CTC negative log-likelihood; zero where no alignment exists."""
    frame_padding = jnp.arange(log_probs.shape[1]) >= output_lengths[:, None]
    label_padding = jnp.arange(labels.shape[1]) >= label_lengths[:, None]
    loss = optax.ctc_loss(log_probs, frame_padding.astype(jnp.float32), labels, label_padding.astype(jnp.float32),
                          blank_id=spec.blank_index)
    return jnp.where(_alignable(output_lengths, labels, label_lengths), loss, 0.0)


def mean_over_rows(spec: ModelSpec, log_probs: jax.Array, batch: Any) -> jax.Array:
    """The mean CTC loss of a padded ``batch`` (its ``output_lengths``, ``labels``, ``label_lengths``):
    the harness's ``rows`` summed, divided by their number; the rows the backend pads on count zero."""
    losses = ctc_per_utterance(spec, log_probs, batch.output_lengths, batch.labels, batch.label_lengths)
    real = jnp.arange(losses.shape[0]) < batch.rows
    return jnp.sum(jnp.where(real, losses, 0.0)) / batch.rows


def _alignable(output_lengths: jax.Array, labels: jax.Array, label_lengths: jax.Array) -> jax.Array:
    """CTC needs a frame per label plus a blank between each pair of equal neighbours."""
    inside = jnp.arange(1, labels.shape[1]) < label_lengths[:, None]
    repeats = jnp.sum((labels[:, 1:] == labels[:, :-1]) & inside, axis=1)
    return output_lengths >= label_lengths + repeats
