"""The transducer loss in TensorFlow: ``benchbase.families.rnnt.loss``'s recursions, on anti-diagonals.

The loss reads two numbers per lattice cell (t, u): log P(blank | t, u) and log P(y_{u+1} | t, u).
The model gathers them from the joint's log-probabilities (``RNNTransducer.lattice``), and
TensorFlow differentiates that gather; the recursions over the two small (batch, T', U + 1)
arrays are one ``tf.custom_gradient`` whose backward pass is the reference's alpha/beta formula
(``transducer_loss_gradient``): one beta recursion the size of the alpha one, returning the
gradient of both arrays at once.

Why not the alternatives:

- Autodiff through the forward ``tf.while_loop``: TensorFlow then keeps every iteration's
  intermediates in stacks and replays some fifteen small operations per anti-diagonal
  backward, each on a (batch, U + 1) slice. On rnnt-mini's first training batches (32
  utterances, lattices of 57 to 85 frames by 63 to 81 positions, one CPU thread) the loss's
  forward and backward took 57 ms a batch that way, against 19 ms with this custom gradient.
- A Python loop over a static number of diagonals: the number changes with every batch's
  frames and labels, so ``tf.function`` would trace (and the run clock pay for) a new graph
  for nearly every batch.
- XLA (``jit_compile``): it compiles anew for every distinct shape, the same problem.
- TensorFlowASR's or warp-transducer's kernels: new dependencies, which the backend avoids.

Both recursions run in a skewed layout, row d holding the anti-diagonal t + u = d indexed by u,
so that each step reads the previous row whole (a shift by one for the label transitions): one
log-add-exp over (batch, U + 1) per diagonal, every utterance at once, in a ``tf.while_loop``
traced once for every shape. Cells outside an utterance's lengths read -inf and never reach the
cells that are read.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

__all__ = ["lattice_losses", "mean_over_batch", "transducer_lattice", "transducer_losses"]

NEGATIVE_INFINITY = float("-inf")

_LoopState = tuple[tf.Tensor, tf.Tensor, tf.TensorArray]
"""A recursion's loop variables: the diagonal, the row just computed, the rows so far."""


def mean_over_batch(losses: tf.Tensor) -> tf.Tensor:
    """``RNNTModelSpec.loss_reduction`` "mean_over_batch": the utterances' negative log-likelihoods
    summed and divided by the batch size (an impossible alignment's 0 counted in it)."""
    return tf.reduce_sum(losses) / tf.cast(tf.maximum(tf.shape(losses)[0], 1), losses.dtype)


def transducer_losses(log_probs: tf.Tensor, labels: tf.Tensor, output_lengths: tf.Tensor,
                      label_lengths: tf.Tensor, blank: int) -> tf.Tensor:
    """Each utterance's negative log-likelihood (batch,), 0 where ``output_lengths`` is 0.

    ``log_probs``: (batch, T', U + 1, symbols), log-softmax over symbols; ``labels``: (batch, U),
    entries at or past ``label_lengths`` ignored. Differentiable with respect to ``log_probs``.
    """
    blank_lattice, emit_lattice = transducer_lattice(log_probs, labels, label_lengths, blank)
    return lattice_losses(blank_lattice, emit_lattice, output_lengths, label_lengths)


def transducer_lattice(log_probs: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor,
                       blank: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(log P(blank | t, u), log P(y_{u+1} | t, u)), each (batch, T', U + 1); the second is -inf
    at u = U, where no label is left to emit. Padding labels are read as the blank."""
    frames = tf.shape(log_probs)[1]
    labels = tf.cast(labels, tf.int32)
    inside = tf.range(tf.shape(labels)[1])[None, :] < tf.cast(label_lengths, tf.int32)[:, None]
    padded = tf.where(inside, labels, blank)  # (batch, U)
    index = tf.repeat(padded[:, None, :, None], frames, axis=1)  # (batch, T', U, 1)
    emit = tf.gather(log_probs[:, :, :-1], index, batch_dims=3)[..., 0]
    emit = tf.pad(emit, [[0, 0], [0, 0], [0, 1]], constant_values=NEGATIVE_INFINITY)
    return log_probs[..., blank], emit


def lattice_losses(blank: tf.Tensor, emit: tf.Tensor, output_lengths: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
    """Each utterance's negative log-likelihood (batch,) from the lattice's two transitions, each
    (batch, T', U + 1) (``transducer_lattice``, or the model's packed ``lattice``); cells outside
    the lengths are never read. An utterance without output frames has no alignment: loss 0 and
    zero gradient (``transducer_impossible_alignments: zero``). Differentiable in both lattices.

    The padded lattice must have at least one frame (T' >= 1): the backend pads a batch too short
    for any encoder frame before it reaches the model.
    """
    return _transducer_loss(blank, emit, tf.cast(output_lengths, tf.int32), tf.cast(label_lengths, tf.int32))


@tf.custom_gradient  # type: ignore[untyped-decorator]
def _transducer_loss(blank: tf.Tensor, emit: tf.Tensor, output_lengths: tf.Tensor,
                     label_lengths: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tuple[tf.Tensor | None, ...]]]:
    lattice = _SkewedLattice(blank, emit, output_lengths, label_lengths)
    alpha = lattice.alpha()
    log_likelihood = lattice.log_likelihood(alpha)
    losses = tf.where(lattice.possible, -log_likelihood, tf.zeros_like(log_likelihood))

    def gradient(upstream: tf.Tensor) -> tuple[tf.Tensor | None, ...]:
        blank_gradient, emit_gradient = lattice.gradients(alpha, lattice.beta(), log_likelihood)
        scale = upstream[:, None, None]
        return blank_gradient * scale, emit_gradient * scale, None, None

    return losses, gradient


class _SkewedLattice:
    """One batch's transition log-probabilities in the skewed, diagonal-major layout,
    (diagonals, batch, U + 1): row d, column u holds cell (d - u, u), -inf outside each
    utterance's lengths. Diagonal-major, so that each recursion step reads one leading row."""

    def __init__(self, blank: tf.Tensor, emit: tf.Tensor, output_lengths: tf.Tensor, label_lengths: tf.Tensor) -> None:
        shape = tf.shape(blank)
        self.batch, self.frames, self.positions = shape[0], shape[1], shape[2]
        self.diagonals = self.frames + self.positions - 1
        self.dtype = blank.dtype
        self.output_lengths, self.label_lengths = output_lengths, label_lengths
        self.possible = output_lengths > 0
        u = tf.range(self.positions)[None, :]
        self.t_of_cell = tf.range(self.diagonals)[:, None] - u  # (diagonals, U + 1)
        inside = ((self.t_of_cell >= 0)[:, None, :] & (self.t_of_cell[:, None, :] < output_lengths[None, :, None])
                  & (u[:, None, :] <= label_lengths[None, :, None]))  # (diagonals, batch, U + 1)
        self.never = tf.constant(NEGATIVE_INFINITY, self.dtype)
        self.blank = tf.where(inside, self._skew(blank), self.never)
        self.emit = tf.where(inside, self._skew(emit), self.never)

    def _skew(self, cells: tf.Tensor) -> tf.Tensor:
        """(batch, T', U + 1) -> (diagonals, batch, U + 1): row d, column u from cell (d - u, u)."""
        t = tf.clip_by_value(self.t_of_cell, 0, self.frames - 1)
        index = t * self.positions + tf.range(self.positions)[None, :]  # into the flattened (T', U + 1)
        flat = tf.reshape(cells, tf.stack([self.batch, self.frames * self.positions]))
        return tf.transpose(tf.gather(flat, index, axis=1), [1, 0, 2])

    def unskew(self, skewed: tf.Tensor) -> tf.Tensor:
        """(diagonals, batch, U + 1) -> (batch, T', U + 1): cell (t, u) from row t + u."""
        u = tf.range(self.positions)[None, :]
        index = (tf.range(self.frames)[:, None] + u) * self.positions + u  # into the flattened (diagonals, U + 1)
        flat = tf.reshape(tf.transpose(skewed, [1, 0, 2]), tf.stack([self.batch, self.diagonals * self.positions]))
        return tf.gather(flat, index, axis=1)

    def alpha(self) -> tf.Tensor:
        """(diagonals, batch, U + 1): alpha(t, u) of cell (t, u) at [t + u, u]."""
        start = tf.where(tf.range(self.positions) == 0, tf.constant(0.0, self.dtype), self.never)
        first = tf.broadcast_to(start[None, :], tf.stack([self.batch, self.positions]))
        rows = tf.TensorArray(self.dtype, size=self.diagonals, element_shape=first.shape).write(0, first)

        def step(d: tf.Tensor, previous: tf.Tensor, rows: tf.TensorArray) -> _LoopState:
            from_blank = previous + self.blank[d - 1]
            from_label = _shift_right(previous + self.emit[d - 1])
            current = _log_add_exp(from_blank, from_label)
            return d + 1, current, rows.write(d, current)

        _, _, rows = tf.while_loop(lambda d, *_: d < self.diagonals, step, (tf.constant(1), first, rows))
        return rows.stack()

    def beta(self) -> tf.Tensor:
        """(diagonals, batch, U + 1): beta of the cell that row d + 1 holds at [d, u], the
        log-probability of finishing from it; 0 at each utterance's end state (output length,
        label length), which lies one diagonal past the utterance's last blank."""
        ends = self.output_lengths + self.label_lengths
        end_cell = (tf.range(self.positions)[None, :] == self.label_lengths[:, None]) & self.possible[:, None]
        zero = tf.constant(0.0, self.dtype)
        last = tf.where(end_cell & (ends == self.diagonals)[:, None], zero, self.never)  # beta's row `diagonals`
        rows = tf.TensorArray(self.dtype, size=self.diagonals, element_shape=last.shape)
        rows = rows.write(self.diagonals - 1, last)

        def step(d: tf.Tensor, following: tf.Tensor, rows: tf.TensorArray) -> _LoopState:
            value = _log_add_exp(following + self.blank[d], _shift_left(following) + self.emit[d])
            # A cell that is an end state keeps its 0 (its own blank and emission read -inf).
            current = tf.where(end_cell & (ends == d)[:, None], zero, value)
            return d - 1, current, rows.write(d - 1, current)

        # Row d - 1 of the result is beta's row d; beta's row 0 (the start) is never read.
        _, _, rows = tf.while_loop(lambda d, *_: d > 0, step, (self.diagonals - 1, last, rows))
        return rows.stack()

    def log_likelihood(self, alpha: tf.Tensor) -> tf.Tensor:
        """log P(y | x) per utterance: alpha(T' - 1, U) + log P(blank | T' - 1, U); 0 where impossible."""
        last = tf.maximum(self.output_lengths - 1 + self.label_lengths, 0)
        index = tf.stack([last, tf.range(self.batch), self.label_lengths], axis=1)
        final = tf.gather_nd(alpha, index) + tf.gather_nd(self.blank, index)
        return tf.where(self.possible, final, tf.zeros_like(final))

    def gradients(self, alpha: tf.Tensor, beta_next: tf.Tensor,
                  log_likelihood: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """d loss / d blank and d loss / d emit, (batch, T', U + 1): minus each transition's share of
        the probability mass (``transducer_loss_gradient``); zero outside the lengths."""
        total = log_likelihood[None, :, None]
        blank_flow = tf.exp(alpha + self.blank + beta_next - total)
        emit_flow = tf.exp(alpha + self.emit + _shift_left(beta_next) - total)
        return -self.unskew(blank_flow), -self.unskew(emit_flow)


def _log_add_exp(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """log(exp(a) + exp(b)), -inf when both are, never NaN: max + log1p(exp(min - max))."""
    larger, smaller = tf.maximum(a, b), tf.minimum(a, b)
    finite = tf.where(larger == NEGATIVE_INFINITY, tf.zeros_like(larger), larger)
    return larger + tf.math.log1p(tf.exp(smaller - finite))


def _shift_right(x: tf.Tensor) -> tf.Tensor:
    """x[:, u - 1] at u, -inf at u = 0."""
    return tf.pad(x[:, :-1], [[0, 0], [1, 0]], constant_values=NEGATIVE_INFINITY)


def _shift_left(x: tf.Tensor) -> tf.Tensor:
    """x[..., u + 1] at u, -inf at the last u."""
    rank = len(x.shape)
    return tf.pad(x[..., 1:], [[0, 0]] * (rank - 1) + [[0, 1]], constant_values=NEGATIVE_INFINITY)
