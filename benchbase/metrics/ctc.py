"""CTC negative log-likelihood in NumPy: the reference for backends' losses and for validation.

The forward (alpha) recursion runs in log space over the extended label sequence
``blank, l1, blank, l2, ..., lL, blank`` (2L + 1 states), vectorized over the batch and the
states, one NumPy step per frame; float64 throughout, whatever the input's precision. An
utterance whose labels cannot be aligned within its output frames (one frame per label plus
one per repeated pair) has probability zero: its loss is +inf, and ``mean_ctc_loss`` counts
it as the workload spec says (``ctc_impossible_alignments``: zero).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["ctc_loss", "mean_ctc_loss"]


def ctc_loss(log_probs: np.ndarray, output_lengths: np.ndarray, labels: np.ndarray, label_lengths: np.ndarray,
             blank: int) -> np.ndarray:
    """Per-utterance CTC negative log-likelihood, float64 (batch,); +inf where no alignment exists.

    ``log_probs`` (batch, frames, symbols) are per-frame log-probabilities (normally a
    log-softmax; they are used as given); frames past ``output_lengths`` are ignored, and so
    are labels past ``label_lengths``.
    """
    log_probs, output_lengths, labels, label_lengths = _checked(log_probs, output_lengths, labels, label_lengths)
    batch = log_probs.shape[0]
    if batch == 0:
        return np.zeros(0)
    states = _extended_labels(labels, blank)
    skip_penalty = np.where(_skip_allowed(states, blank), 0.0, -np.inf)
    # alpha[s] lives at padded[:, s + 2]: the two leading -inf columns make alpha[s - 1] and
    # alpha[s - 2] views instead of copies.
    padded = np.full((batch, states.shape[1] + 2), -np.inf)
    padded[:, 2:4] = 0.0  # before the first frame, a path may start on the first blank or the first label
    rows = np.arange(batch)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        for frame in range(int(output_lengths.max(initial=0))):
            emitted = log_probs[rows, frame, states].astype(np.float64)
            if frame == 0:
                step = padded[:, 2:] + emitted
            else:
                step = _logsumexp3(padded[:, 2:], padded[:, 1:-1], padded[:, :-2] + skip_penalty) + emitted
            # Utterances that have run out of frames keep their last alpha.
            active = (frame < output_lengths)[:, None]
            padded[:, 2:] = np.where(active, step, padded[:, 2:])
    alpha = padded[:, 2:]
    return -_final_log_likelihood(alpha, output_lengths, label_lengths)


def mean_ctc_loss(log_probs: np.ndarray, output_lengths: np.ndarray, labels: np.ndarray, label_lengths: np.ndarray,
                  blank: int, impossible: Literal["zero", "inf"] = "zero") -> float:
    """The batch loss of ``ModelSpec.ctc_reduction`` "mean_over_batch": the sum of the utterances'
    losses divided by the batch size, impossible alignments counted as 0 ("zero", the spec's
    ``ctc_impossible_alignments``) or left infinite ("inf")."""
    if impossible not in ("zero", "inf"):
        raise ValueError(f"impossible must be 'zero' or 'inf', not {impossible!r}")
    losses = ctc_loss(log_probs, output_lengths, labels, label_lengths, blank)
    if impossible == "zero":
        losses = np.where(np.isinf(losses), 0.0, losses)
    return float(losses.sum() / max(len(losses), 1))


def _checked(log_probs, output_lengths, labels, label_lengths):
    log_probs = np.asarray(log_probs)
    output_lengths = np.asarray(output_lengths, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    label_lengths = np.asarray(label_lengths, dtype=np.int64)
    if log_probs.ndim != 3:
        raise ValueError(f"log_probs must be (batch, frames, symbols), got shape {log_probs.shape}")
    batch, frames, _ = log_probs.shape
    if labels.ndim != 2 or labels.shape[0] != batch or output_lengths.shape != (batch,) \
            or label_lengths.shape != (batch,):
        raise ValueError("labels must be (batch, longest label) and both lengths (batch,) for "
                         f"{batch} utterances")
    if (output_lengths > frames).any() or (output_lengths < 0).any():
        raise ValueError(f"output_lengths must be within [0, {frames}] frames")
    if (label_lengths > labels.shape[1]).any() or (label_lengths < 0).any():
        raise ValueError(f"label_lengths must be within [0, {labels.shape[1]}]")
    return log_probs, output_lengths, labels, label_lengths


def _extended_labels(labels: np.ndarray, blank: int) -> np.ndarray:
    """(batch, 2L + 1): blanks around and between the labels. Labels past an utterance's length
    are carried along; the recursion only moves forward, so states past 2 * length + 1 never
    reach the states that are read at the end."""
    batch, longest = labels.shape
    states = np.full((batch, 2 * longest + 1), blank, dtype=np.int64)
    states[:, 1::2] = labels
    return states


def _skip_allowed(states: np.ndarray, blank: int) -> np.ndarray:
    """Where a path may jump two states (from label s-2 to label s, skipping a blank): only
    between two different labels, since a repeated label needs a blank between its copies."""
    skips = np.zeros(states.shape, dtype=bool)
    skips[:, 2:] = (states[:, 2:] != blank) & (states[:, 2:] != states[:, :-2])
    return skips


def _logsumexp3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """log(exp(a) + exp(b) + exp(c)) elementwise, -inf where all three are -inf (one log and
    three exps: faster than two np.logaddexp calls, which dominate the frame loop)."""
    top = np.maximum(np.maximum(a, b), c)
    top[np.isneginf(top)] = 0.0
    total = np.exp(a - top)
    total += np.exp(b - top)
    total += np.exp(c - top)
    return np.log(total) + top


def _final_log_likelihood(alpha: np.ndarray, output_lengths: np.ndarray, label_lengths: np.ndarray) -> np.ndarray:
    """A path ends on the last label or the blank after it; no frames: probability zero (one for no labels)."""
    rows = np.arange(alpha.shape[0])
    last_blank = 2 * label_lengths
    ends_on_blank = alpha[rows, last_blank]
    ends_on_label = np.where(label_lengths > 0, alpha[rows, np.maximum(last_blank - 1, 0)], -np.inf)
    likelihood = np.logaddexp(ends_on_blank, ends_on_label)
    return np.where(output_lengths > 0, likelihood, np.where(label_lengths == 0, 0.0, -np.inf))
