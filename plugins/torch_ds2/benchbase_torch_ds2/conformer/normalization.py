"""The Conformer's two normalizations, as ``benchbase.families.conformer.spec`` pins them.

Both scale by ``1 + scale`` (the scale initialised to 0, AlgoPerf's convention), so neither is
PyTorch's module with its ``weight`` of ones. The BatchNorm averages over the utterances' own
frames only: PyTorch's (and DS2's) average over every frame of the padded batch, which would
make an utterance's output depend on how much padding the batch it trains in carries.
"""

from __future__ import annotations

import torch
from torch import nn

from benchbase.families.conformer.spec import ConformerModelSpec

__all__ = ["LayerNorm", "MaskedBatchNorm"]


class LayerNorm(nn.Module):
    """``(x - mean) / sqrt(var + eps) * (1 + scale) + bias`` over the last dimension; float32
    under autocast (torch.autocast runs layer_norm in float32)."""

    def __init__(self, channels: int, epsilon: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.epsilon = epsilon

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, (x.shape[-1],), 1.0 + self.scale, self.bias, eps=self.epsilon)


class MaskedBatchNorm(nn.Module):
    """BatchNorm of (batch, frames, channels) over the valid frames of every row.

    Training normalizes with the batch's mean and biased variance over every valid frame and
    folds them into the running statistics, ``running = keep * running + (1 - keep) * batch``
    (``batchnorm_momentum`` is the share kept, the Keras convention); evaluation normalizes with
    the running statistics. Padded frames of the output are zero. Computed in float32 whatever
    the autocast type: the statistics of a few thousand frames lose too much in bfloat16.
    """

    def __init__(self, channels: int, spec: ConformerModelSpec, synchronized: bool = False) -> None:
        """``synchronized``: one of several processes training together; the statistics are then
        those of the valid frames of the whole global batch."""
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(channels))
        self.offset = nn.Parameter(torch.zeros(channels))
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("variance", torch.ones(channels))
        self.keep = spec.batchnorm_momentum
        self.epsilon = spec.batchnorm_epsilon
        self.synchronized = synchronized

    def forward(self, x: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
        """``padded``: bool (batch, frames, 1), True at the frames past each row's length."""
        values = x.float()
        if self.training:
            mean, variance = (self._global_moments if self.synchronized else _moments)(values, padded)
            with torch.no_grad():
                self.mean.mul_(self.keep).add_(mean.detach(), alpha=1.0 - self.keep)
                self.variance.mul_(self.keep).add_(variance.detach(), alpha=1.0 - self.keep)
        else:
            mean, variance = self.mean, self.variance
        normalized = (values - mean) * torch.rsqrt(variance + self.epsilon)
        return (normalized * (1.0 + self.scale) + self.offset).masked_fill(padded, 0.0)

    def _global_moments(self, values: torch.Tensor, padded: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and biased variance of the valid frames of every process's slice.

        The slices hold different numbers of valid frames, so the sum, the sum of squares and the
        count are all-reduced together (one collective forward, one backward: torch.distributed.nn's
        all_reduce is differentiable), in float64, where E[x^2] - E[x]^2 does not cancel as it would
        in float32 (as DS2's synchronized BatchNorm does, ``ds2.model.SpecBatchNorm1d``).
        """
        from torch.distributed.nn.functional import all_reduce

        kept = values.masked_fill(padded, 0.0).double()
        count = (~padded).sum(dtype=torch.float64).expand(values.shape[-1])
        sums = all_reduce(torch.stack([kept.sum(dim=(0, 1)), kept.square().sum(dim=(0, 1)), count]))
        mean = sums[0] / sums[2]
        variance = (sums[1] / sums[2] - mean.square()).clamp_min(0.0)
        return mean.float(), variance.float()


def _moments(values: torch.Tensor, padded: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and biased variance over the valid frames, in two passes (no cancellation)."""
    count = (~padded).sum(dtype=torch.float32)
    mean = values.masked_fill(padded, 0.0).sum(dim=(0, 1)) / count
    variance = (values - mean).masked_fill(padded, 0.0).square().sum(dim=(0, 1)) / count
    return mean, variance
