"""The transducer loss (Graves 2012, "Sequence Transduction with Recurrent Neural Networks") and
its gradient, in float64 NumPy: the reference every RNN-T backend's loss is checked against.

An alignment of labels y_1..y_U to T' encoder frames is a path through the lattice of states
(t, u), t < T' frames consumed and u <= U labels emitted, from (0, 0): at (t, u) the model
either emits the next label y_{u+1} with probability P(y_{u+1} | t, u), moving to (t, u + 1),
or emits the blank with P(blank | t, u), moving to (t + 1, u). Every path ends with the blank
at (T' - 1, U), so it holds exactly T' blanks and U labels, and every label sequence has one
when T' >= 1 (a frame may emit any number of labels). With log_probs[b, t, u, k] = log P(k | t, u):

    alpha(0, 0) = 0
    alpha(t, u) = logaddexp(alpha(t - 1, u) + log P(blank | t - 1, u), alpha(t, u - 1) + log P(y_u | t, u - 1))
    loss = -log P(y | x) = -(alpha(T' - 1, U) + log P(blank | T' - 1, U))

An utterance with T' = 0 has no path: its loss is +inf here, and the spec's
``transducer_impossible_alignments: zero`` counts it zero (``mean_transducer_loss``).
Both recursions run over the anti-diagonals t + u = const, every utterance of the batch and
every cell of a diagonal at once; cells past an utterance's lengths are computed over padding
and never reach the cells that are read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

__all__ = ["mean_transducer_loss", "transducer_loss", "transducer_loss_gradient"]


def transducer_loss(log_probs: np.ndarray, labels: np.ndarray, output_lengths: np.ndarray,
                    label_lengths: np.ndarray, blank: int) -> np.ndarray:
    """Each utterance's negative log-likelihood, float64 (batch,); +inf where output_lengths is 0.

    ``log_probs``: (batch, T', U + 1, symbols), log-softmax over symbols (``reference.joint``);
    ``labels``: (batch, U), entries at or past ``label_lengths`` ignored; valid labels are
    symbols other than ``blank``.
    """
    lattice = _Lattice(log_probs, labels, output_lengths, label_lengths, blank)
    return -lattice.log_likelihood(lattice.alpha())


def mean_transducer_loss(log_probs: np.ndarray, labels: np.ndarray, output_lengths: np.ndarray,
                         label_lengths: np.ndarray, blank: int, impossible: Literal["zero", "inf"] = "zero") -> float:
    """The batch loss of ``loss_reduction`` "mean_over_batch": the utterances' losses summed and
    divided by the batch size, impossible alignments counted 0 ("zero", the spec's
    ``transducer_impossible_alignments``) or left infinite ("inf")."""
    if impossible not in ("zero", "inf"):
        raise ValueError(f"impossible must be 'zero' or 'inf', not {impossible!r}")
    losses = transducer_loss(log_probs, labels, output_lengths, label_lengths, blank)
    if impossible == "zero":
        losses = np.where(np.isinf(losses), 0.0, losses)
    return float(losses.sum() / max(len(losses), 1))


def transducer_loss_gradient(log_probs: np.ndarray, labels: np.ndarray, output_lengths: np.ndarray,
                             label_lengths: np.ndarray, blank: int) -> np.ndarray:
    """d loss[b] / d log_probs[b] for every utterance b, float64, the shape of ``log_probs``
    (the gradient of the losses' sum; divide by the batch size for "mean_over_batch").

    With beta(t, u) the log-probability of finishing from (t, u) (beta = 0 at the end state
    (T', U), past the final blank) and P = P(y | x):

        d loss / d log P(blank | t, u)   = -exp(alpha(t, u) + log P(blank | t, u) + beta(t + 1, u) - log P)
        d loss / d log P(y_{u+1} | t, u) = -exp(alpha(t, u) + log P(y_{u+1} | t, u) + beta(t, u + 1) - log P)

    and zero for every other symbol, every cell past the utterance's lengths, and every
    utterance without an alignment (T' = 0). Each is minus the share of the probability mass
    that takes that transition, so the entries of a frame's blanks sum to -1 and those of a
    label's emissions to -1. The gradient with respect to the logits of a log-softmax is
    ``grad - softmax * grad.sum(-1)``.
    """
    lattice = _Lattice(log_probs, labels, output_lengths, label_lengths, blank)
    alpha, beta = lattice.alpha(), lattice.beta()
    log_likelihood = lattice.log_likelihood(alpha)
    possible = np.isfinite(log_likelihood)
    total = np.where(possible, log_likelihood, 0.0)[:, None, None]
    inside = lattice.inside() & possible[:, None, None]
    alpha = alpha[:, 1:, 1:]
    with np.errstate(invalid="ignore"):
        blank_flow = np.exp(alpha + lattice.blank + beta[:, 1:, :-1] - total)
        emit_flow = np.exp(alpha + lattice.emit + beta[:, :-1, 1:] - total)
    gradient = np.zeros(lattice.log_probs.shape)
    gradient[..., blank] = -np.where(inside, blank_flow, 0.0)
    emits = inside[:, :, :-1] & (np.arange(lattice.longest) < lattice.label_lengths[:, None, None])
    emit_gradient = -np.where(emits, emit_flow[:, :, :-1], 0.0)
    # Added, not put: a padding position's label reads as the blank, whose own entry is set.
    emitted = np.zeros(gradient[:, :, :-1].shape)
    np.put_along_axis(emitted, lattice.labels[:, None, :, None].repeat(lattice.frames, axis=1),
                      emit_gradient[..., None], axis=3)
    gradient[:, :, :-1] += emitted
    return gradient


class _Lattice:
    """One batch's transition log-probabilities on the (t, u) lattice, checked."""

    def __init__(self, log_probs, labels, output_lengths, label_lengths, blank: int) -> None:
        self.log_probs = np.asarray(log_probs, dtype=np.float64)
        labels = np.asarray(labels, dtype=np.int64)
        self.output_lengths = np.asarray(output_lengths, dtype=np.int64)
        self.label_lengths = np.asarray(label_lengths, dtype=np.int64)
        _check(self.log_probs, labels, self.output_lengths, self.label_lengths, blank)
        self.batch, self.frames, positions, _ = self.log_probs.shape
        self.longest = positions - 1
        # Padding labels read as the blank: a valid index whose value never reaches a read cell.
        self.labels = np.where(np.arange(self.longest) < self.label_lengths[:, None], labels, blank)
        self.blank = self.log_probs[..., blank]  # (batch, T', U + 1): log P(blank | t, u)
        emit = np.take_along_axis(self.log_probs[:, :, :-1], self.labels[:, None, :, None], axis=3)[..., 0]
        # (batch, T', U + 1): log P(y_{u+1} | t, u), -inf at u = U (no label left to emit)
        self.emit = np.concatenate([emit, np.full((self.batch, self.frames, 1), -np.inf)], axis=2)

    def diagonals(self, first: int = 0, reverse: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(t, u) index arrays of each anti-diagonal t + u = d >= first of the padded lattice, in order."""
        order = range(first, self.frames + self.longest) if self.frames else range(0)
        for diagonal in reversed(order) if reverse else order:
            t = np.arange(max(0, diagonal - self.longest), min(self.frames - 1, diagonal) + 1)
            yield t, diagonal - t

    def alpha(self) -> np.ndarray:
        """(batch, T' + 1, U + 2): alpha(t, u) at [t + 1, u + 1], -inf in the leading row and column."""
        alpha = np.full((self.batch, self.frames + 1, self.longest + 2), -np.inf)
        alpha[:, 1, 1] = 0.0
        for t, u in self.diagonals(first=1):
            from_blank = alpha[:, t, u + 1] + self.blank[:, t - 1, u]  # t - 1 = -1 meets the -inf row
            from_label = alpha[:, t + 1, u] + self.emit[:, t, u - 1]  # u - 1 = -1 meets the -inf column
            alpha[:, t + 1, u + 1] = np.logaddexp(from_blank, from_label)
        return alpha

    def beta(self) -> np.ndarray:
        """(batch, T' + 1, U + 2): beta(t, u) at [t, u]; 0 at each utterance's end state
        (output length, label length), -inf wherever no path to it exists."""
        beta = np.full((self.batch, self.frames + 1, self.longest + 2), -np.inf)
        rows = np.arange(self.batch)
        beta[rows, self.output_lengths, self.label_lengths] = 0.0
        for t, u in self.diagonals(reverse=True):
            value = np.logaddexp(beta[:, t + 1, u] + self.blank[:, t, u], beta[:, t, u + 1] + self.emit[:, t, u])
            inside = (t < self.output_lengths[:, None]) & (u <= self.label_lengths[:, None])
            beta[:, t, u] = np.where(inside, value, beta[:, t, u])
        return beta

    def log_likelihood(self, alpha: np.ndarray) -> np.ndarray:
        """log P(y | x) per utterance: alpha(T' - 1, U) + log P(blank | T' - 1, U); -inf for T' = 0."""
        rows, last = np.arange(self.batch), np.maximum(self.output_lengths - 1, 0)
        final = alpha[rows, self.output_lengths, self.label_lengths + 1] + self.blank[rows, last, self.label_lengths]
        return np.where(self.output_lengths > 0, final, -np.inf)

    def inside(self) -> np.ndarray:
        """(batch, T', U + 1): the cells within each utterance's lengths."""
        t = np.arange(self.frames)[None, :, None] < self.output_lengths[:, None, None]
        u = np.arange(self.longest + 1)[None, None, :] <= self.label_lengths[:, None, None]
        return t & u


def _check(log_probs: np.ndarray, labels: np.ndarray, output_lengths: np.ndarray, label_lengths: np.ndarray,
           blank: int) -> None:
    if log_probs.ndim != 4:
        raise ValueError(f"log_probs must be (batch, frames, labels + 1, symbols), got shape {log_probs.shape}")
    batch, frames, positions, symbols = log_probs.shape
    if labels.shape != (batch, positions - 1) or output_lengths.shape != (batch,) or label_lengths.shape != (batch,):
        raise ValueError(f"labels must be ({batch}, {positions - 1}) and both lengths ({batch},), got "
                         f"{labels.shape}, {output_lengths.shape}, {label_lengths.shape}")
    if (output_lengths > frames).any() or (output_lengths < 0).any():
        raise ValueError(f"output_lengths must be within [0, {frames}] frames")
    if (label_lengths > positions - 1).any() or (label_lengths < 0).any():
        raise ValueError(f"label_lengths must be within [0, {positions - 1}]")
    valid = labels[np.arange(positions - 1) < label_lengths[:, None]]
    if not 0 <= blank < symbols or ((valid < 0) | (valid >= symbols) | (valid == blank)).any():
        raise ValueError(f"labels must be symbols in [0, {symbols}) other than the blank {blank}")
