"""The transducer loss in PyTorch: ``benchbase.families.rnnt.loss``'s recursions, on anti-diagonals.

The loss reads two numbers per lattice cell (t, u): log P(blank | t, u) and log P(y_{u+1} | t, u).
They are gathered from the joint's log-probabilities by autograd (a gather, whose backward is a
scatter into the (batch, T', U + 1, symbols) gradient); the recursions over those two small
(batch, T', U + 1) arrays are a custom ``autograd.Function`` whose backward is the reference's
alpha/beta formula, not autograd through the forward recursion. Autograd would record some ten
operations per anti-diagonal and replay them backward, each on a (batch, U + 1) slice; the
formula costs one beta recursion of the same size as the alpha one and returns the gradient of
both arrays at once, exactly as ``transducer_loss_gradient`` defines it.

Both recursions run in a skewed layout, row d holding the anti-diagonal t + u = d indexed by u,
so that each step reads the previous row whole (a shift by one for the label transitions, a view
of a row with one more column of -inf): one logaddexp over (batch, U + 1) per diagonal, every
utterance at once. Cells outside an utterance's lengths read -inf and never reach the cells that
are read.
"""

from __future__ import annotations

import torch

__all__ = ["lattice_losses", "mean_over_batch", "transducer_lattice", "transducer_losses"]


def mean_over_batch(losses: torch.Tensor) -> torch.Tensor:
    """``RNNTModelSpec.loss_reduction`` "mean_over_batch": the utterances' negative log-likelihoods
    summed and divided by the batch size (an impossible alignment's 0 counted in it)."""
    return losses.sum() / max(losses.shape[0], 1)


def transducer_losses(log_probs: torch.Tensor, labels: torch.Tensor, output_lengths: torch.Tensor,
                      label_lengths: torch.Tensor, blank: int) -> torch.Tensor:
    """Each utterance's negative log-likelihood (batch,), 0 where ``output_lengths`` is 0.

    ``log_probs``: (batch, T', U + 1, symbols), log-softmax over symbols; ``labels``: (batch, U),
    entries at or past ``label_lengths`` ignored. Differentiable with respect to ``log_probs``.
    """
    blank_lattice, emit_lattice = transducer_lattice(log_probs, labels, label_lengths, blank)
    return lattice_losses(blank_lattice, emit_lattice, output_lengths, label_lengths)


def lattice_losses(blank: torch.Tensor, emit: torch.Tensor, output_lengths: torch.Tensor,
                   label_lengths: torch.Tensor) -> torch.Tensor:
    """Each utterance's negative log-likelihood (batch,) from the lattice's two transitions, each
    (batch, T', U + 1) (``transducer_lattice``, or the model's packed ``lattice``); cells outside
    the lengths are never read. An utterance without output frames has no alignment: loss 0 and
    zero gradient (``transducer_impossible_alignments: zero``). Differentiable in both lattices."""
    if blank.shape[1] == 0:  # not one output frame in the batch: every alignment is impossible
        return (blank.sum(dim=(1, 2)) + emit.sum(dim=(1, 2))) * 0.0
    return _TransducerLoss.apply(blank, emit, output_lengths.long(), label_lengths.long())


def transducer_lattice(log_probs: torch.Tensor, labels: torch.Tensor, label_lengths: torch.Tensor,
                       blank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log P(blank | t, u), log P(y_{u+1} | t, u)), each (batch, T', U + 1); the second is -inf
    at u = U, where no label is left to emit. Padding labels are read as the blank."""
    batch, frames, positions, _ = log_probs.shape
    labels = labels.long()
    padded = torch.where(torch.arange(positions - 1, device=labels.device) < label_lengths[:, None], labels, blank)
    index = padded[:, None, :, None].expand(batch, frames, positions - 1, 1)
    emit = torch.gather(log_probs[:, :, :-1], 3, index)[..., 0]
    emit = torch.nn.functional.pad(emit, (0, 1), value=float("-inf"))
    return log_probs[..., blank], emit


class _TransducerLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, blank: torch.Tensor, emit: torch.Tensor, output_lengths: torch.Tensor,
                label_lengths: torch.Tensor) -> torch.Tensor:
        lattice = _SkewedLattice(blank.detach(), emit.detach(), output_lengths, label_lengths)
        alpha = lattice.alpha()
        log_likelihood = lattice.log_likelihood(alpha)
        ctx.lattice, ctx.alpha, ctx.log_likelihood = lattice, alpha, log_likelihood
        return torch.where(lattice.possible, -log_likelihood, 0.0)

    @staticmethod
    def backward(ctx, grad_losses: torch.Tensor):
        lattice: _SkewedLattice = ctx.lattice
        blank_gradient, emit_gradient = lattice.gradients(ctx.alpha, lattice.beta(), ctx.log_likelihood)
        scale = grad_losses[:, None, None]
        return blank_gradient * scale, emit_gradient * scale, None, None


class _SkewedLattice:
    """One batch's transition log-probabilities in the skewed layout, (batch, diagonals, U + 1):
    row d, column u holds cell (d - u, u), -inf outside each utterance's lengths."""

    def __init__(self, blank: torch.Tensor, emit: torch.Tensor, output_lengths: torch.Tensor,
                 label_lengths: torch.Tensor) -> None:
        self.batch, self.frames, self.positions = blank.shape
        self.diagonals = self.frames + self.positions - 1
        self.output_lengths, self.label_lengths = output_lengths, label_lengths
        self.possible = output_lengths > 0
        device = blank.device
        d = torch.arange(self.diagonals, device=device)[:, None]
        u = torch.arange(self.positions, device=device)[None, :]
        self.t_of_cell = d - u  # (diagonals, U + 1)
        inside = ((self.t_of_cell >= 0)[None] & (self.t_of_cell[None] < output_lengths[:, None, None])
                  & (u[None] <= label_lengths[:, None, None]))
        self.blank = self._skew(blank).masked_fill(~inside, float("-inf"))
        self.emit = self._skew(emit).masked_fill(~inside, float("-inf"))

    def _skew(self, cells: torch.Tensor) -> torch.Tensor:
        t = self.t_of_cell.clamp(0, self.frames - 1)
        u = torch.arange(self.positions, device=cells.device).expand_as(t)
        return cells[:, t, u]

    def unskew(self, skewed: torch.Tensor) -> torch.Tensor:
        """(batch, diagonals, U + 1) -> (batch, T', U + 1): cell (t, u) from row t + u."""
        t = torch.arange(self.frames, device=skewed.device)[:, None]
        u = torch.arange(self.positions, device=skewed.device)[None, :]
        return skewed[:, t + u, u.expand(self.frames, -1)]

    def alpha(self) -> torch.Tensor:
        """(batch, diagonals, U + 1): alpha(t, u) of cell (t, u) at [t + u, u]."""
        # One column of -inf before u = 0, so that the label transition's shift by one is a view of
        # the previous row, not a padded copy of it: one kernel fewer per diagonal.
        alpha = torch.full((self.batch, self.diagonals, self.positions + 1), float("-inf"),
                           dtype=self.blank.dtype, device=self.blank.device)
        alpha[:, 0, 1] = 0.0
        # Each diagonal's row as a view, taken once (on a GPU every indexing call costs the host).
        rows, blank, emit = alpha.unbind(1), self.blank.unbind(1), _shift_right(self.emit).unbind(1)
        for d in range(1, self.diagonals):
            previous = rows[d - 1]
            rows[d][:, 1:] = torch.logaddexp(previous[:, 1:] + blank[d - 1], previous[:, :-1] + emit[d - 1])
        return alpha[:, :, 1:]

    def beta(self) -> torch.Tensor:
        """(batch, diagonals + 1, U + 1): beta of cell (t, u) at [t + u, u]: the log-probability
        of finishing from it, 0 at each utterance's end state (output length, label length)."""
        utterances = torch.arange(self.batch, device=self.blank.device)
        ends = self.output_lengths + self.label_lengths
        # Each possible utterance's end state, marked for every row at once (no boolean indexing,
        # whose nonzero() would wait for the device: ``graphed_loss``) and read one diagonal at a
        # time. One column of -inf after u = U, so that the label transition's shift is a view.
        end_state = torch.zeros((self.batch, self.diagonals + 1, self.positions + 1), dtype=torch.bool,
                                device=self.blank.device)
        end_state.index_put_((utterances, ends, self.label_lengths), self.possible)
        beta = torch.full(end_state.shape, float("-inf"), dtype=self.blank.dtype,
                          device=self.blank.device).masked_fill_(end_state, 0.0)
        rows, ends_at = beta.unbind(1), end_state[:, :, :-1].unbind(1)
        blank, emit = self.blank.unbind(1), self.emit.unbind(1)
        for d in range(self.diagonals - 1, -1, -1):
            following = rows[d + 1]
            value = torch.logaddexp(following[:, :-1] + blank[d], following[:, 1:] + emit[d])
            # A cell that is an end state keeps its 0 (its own blank and emission read -inf).
            rows[d][:, :-1] = torch.where(ends_at[d], 0.0, value)
        return beta[:, :, :-1]

    def log_likelihood(self, alpha: torch.Tensor) -> torch.Tensor:
        """log P(y | x) per utterance: alpha(T' - 1, U) + log P(blank | T' - 1, U); 0 where impossible."""
        rows = torch.arange(self.batch, device=alpha.device)
        last = (self.output_lengths - 1 + self.label_lengths).clamp(min=0)
        final = alpha[rows, last, self.label_lengths] + self.blank[rows, last, self.label_lengths]
        return torch.where(self.possible, final, 0.0)

    def gradients(self, alpha: torch.Tensor, beta: torch.Tensor,
                  log_likelihood: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """d loss / d blank and d loss / d emit, (batch, T', U + 1): minus each transition's share of
        the probability mass (``transducer_loss_gradient``); zero outside the lengths."""
        total = log_likelihood[:, None, None]
        blank_flow = torch.exp(alpha + self.blank + beta[:, 1:] - total)
        emit_flow = torch.exp(alpha + self.emit + _shift_left(beta[:, 1:]) - total)
        return -self.unskew(blank_flow), -self.unskew(emit_flow)


def _shift_right(x: torch.Tensor) -> torch.Tensor:
    """x[..., u - 1] at u, -inf at u = 0."""
    return torch.nn.functional.pad(x[..., :-1], (1, 0), value=float("-inf"))


def _shift_left(x: torch.Tensor) -> torch.Tensor:
    """x[..., u + 1] at u, -inf at the last u."""
    return torch.nn.functional.pad(x[..., 1:], (0, 1), value=float("-inf"))
