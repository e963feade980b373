"""conformer-mini in plain PyTorch: nn.Linear, nn.LayerNorm, F.scaled_dot_product_attention with
a boolean key mask, nn.Conv2d and nn.Conv1d in the default layout, nn.BatchNorm1d, F.ctc_loss,
clip_grad_norm_ and torch.optim.AdamW, each module with its own initialization."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from standalone.conformer_mini import (
    ATTENTION_HEADS,
    BATCH,
    BATCHNORM_EPSILON,
    BATCHNORM_MOMENTUM,
    BETA1,
    BETA2,
    BLANK,
    CLIP_NORM,
    CONV_KERNEL_SIZE,
    DROPOUT,
    ENCODER_DIM,
    ENCODER_LAYERS,
    EPSILON,
    HEAD_DIM,
    HIDDEN,
    LAYERNORM_EPSILON,
    LEARNING_RATE,
    OP_ATTENTION,
    OP_DEPTHWISE,
    OP_FEED_FORWARD,
    OP_OUTPUT,
    OP_PROJECTION,
    OP_QKV,
    OP_SDPA,
    OP_SUBSAMPLING,
    OP_SUBSAMPLING_LAST,
    PROJECTED,
    SUBSAMPLING_LAYERS,
    SYMBOLS,
    WEIGHT_DECAY,
    Batch,
    key_valid,
    sinusoids,
)

__all__ = ["operations", "training_step"]


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(ENCODER_DIM, eps=LAYERNORM_EPSILON)
        self.inner, self.outer = nn.Linear(ENCODER_DIM, HIDDEN), nn.Linear(HIDDEN, ENCODER_DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(F.silu(self.inner(self.norm(x))))


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(ENCODER_DIM, eps=LAYERNORM_EPSILON)
        self.qkv, self.output = nn.Linear(ENCODER_DIM, 3 * ENCODER_DIM), nn.Linear(ENCODER_DIM, ENCODER_DIM)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        batch, frames, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(batch, frames, 3, ATTENTION_HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
        return self.output(attended.transpose(1, 2).reshape(batch, frames, d))


class ConvolutionModule(nn.Module):
    """LayerNorm -> GLU -> depthwise conv -> BatchNorm -> swish -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        d = ENCODER_DIM
        self.norm = nn.LayerNorm(d, eps=LAYERNORM_EPSILON)
        self.glu = nn.Linear(d, 2 * d)
        self.depthwise = nn.Conv1d(d, d, CONV_KERNEL_SIZE, padding=CONV_KERNEL_SIZE // 2, groups=d, bias=False)
        self.batchnorm = nn.BatchNorm1d(d, eps=BATCHNORM_EPSILON, momentum=1.0 - BATCHNORM_MOMENTUM)
        self.output = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = F.glu(self.glu(self.norm(x)), dim=-1).transpose(1, 2)  # (batch, d, frames)
        return self.output(F.silu(self.batchnorm(self.depthwise(gated))).transpose(1, 2))


class ConformerBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ff1, self.attention, self.conv = FeedForward(), SelfAttention(), ConvolutionModule()
        self.ff2 = FeedForward()
        self.norm = nn.LayerNorm(ENCODER_DIM, eps=LAYERNORM_EPSILON)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * F.dropout(self.ff1(x), DROPOUT, self.training)
        x = x + F.dropout(self.attention(x, key_mask), DROPOUT, self.training)
        x = x + F.dropout(self.conv(x), DROPOUT, self.training)
        x = x + 0.5 * F.dropout(self.ff2(x), DROPOUT, self.training)
        return self.norm(x)


class Conformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        d = ENCODER_DIM
        self.convs = nn.ModuleList(nn.Conv2d(1 if layer == 0 else d, d, 3, stride=2, padding=1)
                                   for layer in range(SUBSAMPLING_LAYERS))
        self.projection = nn.Linear(PROJECTED, d)
        self.blocks = nn.ModuleList(ConformerBlock() for _ in range(ENCODER_LAYERS))
        self.final_norm = nn.LayerNorm(d, eps=LAYERNORM_EPSILON)
        self.output = nn.Linear(d, SYMBOLS)

    def forward(self, features: torch.Tensor, key_mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(batch, frames, features) -> log-probs (batch, output frames, symbols)."""
        x = features[:, None]  # (batch, 1, time, frequency)
        for conv in self.convs:
            x = F.relu(conv(x))
        batch, channels, time, bins = x.shape
        x = self.projection(x.permute(0, 2, 3, 1).reshape(batch, time, bins * channels)) + positions
        x = F.dropout(x, DROPOUT, self.training)
        for block in self.blocks:
            x = block(x, key_mask)
        return F.log_softmax(self.output(self.final_norm(x)), dim=-1)


def training_step(batch: Batch, seed: int) -> Callable[[], float]:
    """One training step on ``batch`` per call; returns the loss."""
    torch.manual_seed(seed)
    model = Conformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(BETA1, BETA2), eps=EPSILON,
                                  weight_decay=WEIGHT_DECAY)
    features = torch.from_numpy(batch.features)
    key_mask = torch.from_numpy(key_valid(batch.output_lengths))
    positions = torch.from_numpy(sinusoids(key_mask.shape[-1]))
    labels, output_lengths, label_lengths = (torch.from_numpy(array).long() for array in
                                             (batch.labels, batch.output_lengths, batch.label_lengths))

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        log_probs = model(features, key_mask, positions)
        loss = F.ctc_loss(log_probs.transpose(0, 1), labels, output_lengths, label_lengths, blank=BLANK,
                          reduction="sum", zero_infinity=True) / BATCH
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        return loss.item()

    return step


def operations(batch: Batch, seed: int) -> dict[str, Callable[[], object]]:
    """Operation name (``conformer_mini.OPERATIONS``) -> a call of its forward and backward."""
    torch.manual_seed(seed)
    d, frames = ENCODER_DIM, int(batch.output_lengths.max())
    key_mask = torch.from_numpy(key_valid(batch.output_lengths))
    feed_forward, attention, convolution = FeedForward(), SelfAttention(), ConvolutionModule()
    projection = nn.Linear(PROJECTED, d)
    conv = nn.Conv2d(1, d, 3, stride=2, padding=1)
    conv_last = copy.deepcopy(conv).to(memory_format=torch.channels_last)
    features = torch.from_numpy(batch.features)[:, None]
    features_last = features.contiguous(memory_format=torch.channels_last)
    encoded = torch.randn(BATCH, frames, d)
    heads = [torch.randn(BATCH, ATTENTION_HEADS, frames, HEAD_DIM) for _ in range(3)]

    def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(HEAD_DIM)
        return torch.softmax(scores.masked_fill(~key_mask, float("-inf")), dim=-1) @ v

    def depthwise_batchnorm(x: torch.Tensor) -> torch.Tensor:
        return convolution.batchnorm(convolution.depthwise(x.transpose(1, 2))).transpose(1, 2)

    return {
        OP_PROJECTION: _gradients(projection, [torch.randn(BATCH, frames, PROJECTED)], [projection]),
        OP_FEED_FORWARD: _gradients(lambda x: feed_forward.outer(F.silu(feed_forward.inner(x))), [encoded],
                                    [feed_forward.inner, feed_forward.outer]),
        OP_QKV: _gradients(attention.qkv, [encoded], [attention.qkv]),
        OP_OUTPUT: _gradients(attention.output, [encoded], [attention.output]),
        OP_SDPA: _gradients(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask), heads),
        OP_ATTENTION: _gradients(math_attention, heads),
        OP_DEPTHWISE: _gradients(depthwise_batchnorm, [encoded], [convolution.depthwise, convolution.batchnorm]),
        # The features are data: no gradient of the convolution's input.
        OP_SUBSAMPLING: _gradients(lambda: F.relu(conv(features)), [], [conv]),
        OP_SUBSAMPLING_LAST: _gradients(lambda: F.relu(conv_last(features_last)), [], [conv_last]),
    }


def _gradients(function: Callable, inputs: list, modules: list = ()) -> Callable[[], object]:
    """A call computes ``function(*inputs)`` and the gradients of its inputs and of the modules'
    weights for a fixed random cotangent."""
    leaves = [tensor.clone().requires_grad_() for tensor in inputs]
    weights = [weight for module in modules for weight in module.parameters()]
    cotangent = torch.randn_like(function(*leaves).detach())

    def run() -> None:
        for tensor in (*leaves, *weights):
            tensor.grad = None
        function(*leaves).backward(cotangent)

    return run
