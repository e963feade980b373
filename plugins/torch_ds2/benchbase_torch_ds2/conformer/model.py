"""The Conformer of ``benchbase.families.conformer.spec`` in PyTorch (AlgoPerf's LibriSpeech model).

    features -> [3x3 conv, stride 2, ReLU, padded frames zeroed but after the last] x subsampling_layers
      -> flatten (frequency, channel) -> Linear -> + sinusoids -> dropout
      -> [x + FFN/2, x + MHSA, x + Conv, x + FFN/2, LayerNorm] x encoder_layers
      -> LayerNorm -> Linear -> log-softmax

Every layer that mixes frames sees the padded frames as zeros (the convolutions) or not at all
(the attention's keys, the BatchNorm's statistics), so an utterance's outputs at its valid frames
do not depend on the batch it is padded in. Outputs at padded frames are garbage that CTC and
decoding never read (the attention's padded queries are not masked, as in AlgoPerf).

The class constants (``Subsampling.ZERO_OUTPUT_PADDING``, ``RELU_IN_PLACE``,
``SelfAttention.KERNEL``, ``FeedForward.MASK_PADDING``) switch the CPU levers measured in
docs/BENCHMARKS.md, "conformer-mini's PyTorch step on a CPU"; each changes at most the padded
frames' garbage and the order of sums.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase_torch_ds2.conformer.normalization import LayerNorm, MaskedBatchNorm

__all__ = ["QUERY_SCALE", "Conformer", "sinusoids"]

QUERY_SCALE = 1.442695041
"""1 / softplus(0): a query scale of 0 multiplies the queries by 1 (AlgoPerf's ``r_softplus_0``)."""


class Conformer(nn.Module):
    def __init__(self, spec: ConformerModelSpec, feature_dimension: int, synchronized: bool = False) -> None:
        """``synchronized``: one of several processes training together (the BatchNorm statistics
        are then the global batch's)."""
        super().__init__()
        self.spec, self.feature_dimension = spec, feature_dimension
        d = spec.encoder_dim
        self.subsampling = Subsampling(spec, feature_dimension)
        self.blocks = nn.ModuleList(ConformerBlock(spec, synchronized) for _ in range(spec.encoder_layers))
        self.final_norm = LayerNorm(d, spec.layernorm_epsilon)
        self.output = nn.Linear(d, spec.symbols)
        self.reset_parameters()
        # After the initialization, which draws the kernels in their logical order whatever the layout.
        self.subsampling.convs.to(memory_format=self.subsampling.memory_format)

    def reset_parameters(self) -> None:
        """The spec's ``init``: every kernel Xavier-uniform with the neutral layout's fans, every
        bias, scale, offset and query scale zero (the normalizations start so), from torch's generator."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                _xavier_uniform(module.weight, module.in_features, module.out_features)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Conv2d):
                field = module.kernel_size[0] * module.kernel_size[1]
                _xavier_uniform(module.weight, field * module.in_channels, field * module.out_channels)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Conv1d):
                # Depthwise: each channel its own one-in, one-out filter, whose fans are its width.
                _xavier_uniform(module.weight, module.kernel_size[0], module.kernel_size[0])

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, frames, features), lengths (batch,) -> log-probs (batch, output frames, symbols), float32.

        Without lengths every frame is valid. Under torch.autocast (bf16, fp16) the convolutions,
        linear layers and attention run in the autocast type; the residual stream, the norms and
        the log-softmax stay float32.
        """
        if feature_lengths is None:
            feature_lengths = torch.full(features.shape[:1], features.shape[1], device=features.device)
        x, lengths = self.subsampling(features, feature_lengths.to(features.device).long())
        padded = (torch.arange(x.shape[1], device=x.device) >= lengths[:, None])[:, :, None]  # (batch, frames, 1)
        key_mask = ~padded[:, None, None, :, 0]  # (batch, 1, 1, frames): True where a key may be attended
        for block in self.blocks:
            x = block(x, padded, key_mask)
        return torch.log_softmax(self.output(self.final_norm(x)).float(), dim=-1)


class Subsampling(nn.Module):
    """The strided convolutions, the projection to encoder_dim, the positions and the dropout.

    The convolutions run channels-last: (batch, time, frequency, channel) in memory, the layout
    that the projection's flatten to (time, frequency x channel) reads without a transposing copy,
    and the one oneDNN and cuDNN's tensor cores compute in natively: conformer-mini's step is 0.86x
    the default layout's on a CPU, and the full model's in bf16 0.82x, though 1.25x in fp32, where
    oneDNN's backward of the 512-channel convolution is slower channels-last (docs/BENCHMARKS.md,
    "The Conformer's subsampling, channels-last"). ``CHANNELS_LAST = False`` before building keeps
    PyTorch's default (batch, channel, time, frequency): the same arithmetic, summed in another
    order, for measuring the layout against it.
    """

    CHANNELS_LAST = True

    ZERO_OUTPUT_PADDING = False
    """Whether the last convolution's padded frames are zeroed too (those between convolutions
    always are: the next one reads across frames). Nothing after it reads a padded frame into a
    valid one (the encoder's layers are per-frame, or mask the keys, or zero their own inputs
    before the depthwise convolution), so the zeroing changes only the padded frames' garbage and
    the backward's exact zeros; it and its backward cost a full pass over the largest activation
    (batch x frames/2 x bins/2 x channels). Read when the module is built."""

    RELU_IN_PLACE = True
    """The ReLU overwrites the convolution's output instead of allocating a tensor as large (a
    fresh allocation of that size is page faults on a CPU). Read when the module is built."""

    def __init__(self, spec: ConformerModelSpec, feature_dimension: int) -> None:
        super().__init__()
        d = spec.encoder_dim
        self.convs = nn.ModuleList(nn.Conv2d(1 if layer == 0 else d, d, 3, stride=2)
                                   for layer in range(spec.subsampling_layers))
        self.projection = nn.Linear(spec.subsampled_bins(feature_dimension) * d, d)
        self.dropout = nn.Dropout(spec.dropout)
        self.max_timescale = spec.max_timescale
        self.memory_format = torch.channels_last if self.CHANNELS_LAST else torch.contiguous_format
        self.zero_output_padding = self.ZERO_OUTPUT_PADDING
        self.relu_in_place = self.RELU_IN_PLACE

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, frames, F), lengths -> (batch, T', d) and the lengths T' of each row."""
        frames = torch.arange(features.shape[1], device=features.device)
        x = features.masked_fill((frames >= lengths[:, None])[:, :, None], 0.0)[:, None]  # (batch, 1, time, freq)
        for index, conv in enumerate(self.convs):
            # Two zero rows after the last of time and frequency, then a valid stride-2 convolution:
            # output row i reads rows 2i .. 2i+2 and there are ceil(n / 2) of them, whatever the
            # batch's padded length (PyTorch's symmetric padding would start at row 2i - 1).
            x = conv(nn.functional.pad(x, (0, 2, 0, 2)).contiguous(memory_format=self.memory_format))
            # In place when allowed: the convolution's backward keeps its input, not its output.
            x = torch.relu_(x) if self.relu_in_place else torch.relu(x)
            lengths = (lengths + 1) // 2
            if index == len(self.convs) - 1 and not self.zero_output_padding:
                break
            padded = (torch.arange(x.shape[2], device=x.device) >= lengths[:, None])[:, None, :, None]
            # masked_fill's copy comes out in the default layout; where() keeps channels-last.
            x = (torch.where(padded, 0.0, x) if self.memory_format == torch.channels_last
                 else x.masked_fill(padded, 0.0))
        batch, channels, time, bins = x.shape
        x = x.permute(0, 2, 3, 1).reshape(batch, time, bins * channels)  # row f * C + c, as the layout has it
        x = self.projection(x) + sinusoids(time, self.projection.out_features, self.max_timescale, x.device)
        return self.dropout(x), lengths


def sinusoids(frames: int, dimension: int, max_timescale: float, device: torch.device) -> torch.Tensor:
    """(frames, dimension) positions: sin(p w_k) in the first half, cos(p w_k) in the second,
    w_k = max_timescale ** (-k / (d/2 - 1)), computed in float64 and rounded once to float32, as
    the spec pins (AlgoPerf's float32 angles drift further from the float64 reference the later the
    frame, beyond the error model's one rounding for the addition on long utterances)."""
    timescales = dimension // 2
    increment = math.log(max_timescale) / max(timescales - 1, 1)
    inverse = torch.exp(torch.arange(timescales, dtype=torch.float64, device=device) * -increment)
    angles = torch.arange(frames, dtype=torch.float64, device=device)[:, None] * inverse[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).float()


class ConformerBlock(nn.Module):
    def __init__(self, spec: ConformerModelSpec, synchronized: bool) -> None:
        super().__init__()
        self.ff1 = FeedForward(spec)
        self.attention = SelfAttention(spec)
        self.conv = ConvolutionModule(spec, synchronized)
        self.ff2 = FeedForward(spec)
        self.norm = LayerNorm(spec.encoder_dim, spec.layernorm_epsilon)

    def forward(self, x: torch.Tensor, padded: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x, padded)
        x = x + self.attention(x, key_mask)
        x = x + self.conv(x, padded)
        x = x + 0.5 * self.ff2(x, padded)
        return self.norm(x)


class FeedForward(nn.Module):
    """LayerNorm -> Linear(d, h) -> swish -> mask -> Linear(h, d) -> mask -> dropout."""

    MASK_PADDING = True
    """Whether the padded frames are zeroed (the two masks). Every operation here is per-frame,
    so they change only the padded frames' garbage. Read when the module is built."""

    def __init__(self, spec: ConformerModelSpec) -> None:
        super().__init__()
        d = spec.encoder_dim
        self.norm = LayerNorm(d, spec.layernorm_epsilon)
        self.inner = nn.Linear(d, d * spec.feed_forward_expansion)
        self.outer = nn.Linear(d * spec.feed_forward_expansion, d)
        self.dropout = nn.Dropout(spec.dropout)
        self.mask_padding = self.MASK_PADDING

    def forward(self, x: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
        hidden = nn.functional.silu(self.inner(self.norm(x)))
        if not self.mask_padding:
            return self.dropout(self.outer(hidden))
        return self.dropout(self.outer(hidden.masked_fill(padded, 0.0)).masked_fill(padded, 0.0))


class SelfAttention(nn.Module):
    """LayerNorm -> one Linear to queries, keys, values -> per-dimension query scale ->
    scaled_dot_product_attention over the valid keys -> Linear -> dropout."""

    KERNEL = "sdpa"
    """How the attention is computed: ``"sdpa"``, scaled_dot_product_attention with the boolean
    key mask; ``"sdpa-additive"``, with the mask as 0 / -inf added to the scores; ``"math"``,
    explicit batched products and a float32 softmax. Read when the module is built."""

    def __init__(self, spec: ConformerModelSpec) -> None:
        super().__init__()
        d = spec.encoder_dim
        self.heads = spec.attention_heads
        self.norm = LayerNorm(d, spec.layernorm_epsilon)
        self.qkv = nn.Linear(d, 3 * d)
        self.query_scale = nn.Parameter(torch.zeros(spec.head_dim))
        self.output = nn.Linear(d, d)
        self.dropout = nn.Dropout(spec.dropout)
        if self.KERNEL not in ("sdpa", "sdpa-additive", "math"):
            raise ValueError(f"SelfAttention.KERNEL: {self.KERNEL!r} is not sdpa, sdpa-additive or math")
        self.kernel = self.KERNEL

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        batch, frames, d = x.shape
        # Columns: queries, keys, values, each d wide, head j the j-th block of d / heads of them.
        q, k, v = self.qkv(self.norm(x)).view(batch, frames, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # In the autocast type: a float32 scale would promote the queries out of it, and SDPA
        # wants one dtype. SDPA then applies the contract's 1 / sqrt(head_dim).
        q = q * (QUERY_SCALE * nn.functional.softplus(self.query_scale)).to(q.dtype)
        attended = self._attend(q, k, v, key_mask)
        return self.dropout(self.output(attended.transpose(1, 2).reshape(batch, frames, d)))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(head_dim) over the valid keys) v, per head."""
        if self.kernel == "sdpa":
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
        additive = torch.zeros(key_mask.shape, dtype=torch.float32, device=key_mask.device).masked_fill(
            ~key_mask, float("-inf"))
        if self.kernel == "sdpa-additive":
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive.to(q.dtype))
        scores = torch.matmul(q, k.transpose(-2, -1)).float() * (1.0 / math.sqrt(q.shape[-1])) + additive
        return torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v)


class ConvolutionModule(nn.Module):
    """LayerNorm -> GLU -> mask -> depthwise conv -> BatchNorm over the valid frames -> swish
    -> Linear -> dropout."""

    def __init__(self, spec: ConformerModelSpec, synchronized: bool) -> None:
        super().__init__()
        d, width = spec.encoder_dim, spec.conv_kernel_size
        self.norm = LayerNorm(d, spec.layernorm_epsilon)
        self.glu = nn.Linear(d, 2 * d)
        self.depthwise = nn.Conv1d(d, d, width, padding=(width - 1) // 2, groups=d, bias=False)
        self.batchnorm = MaskedBatchNorm(d, spec, synchronized)
        self.output = nn.Linear(d, d)
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
        values, gates = self.glu(self.norm(x)).chunk(2, dim=-1)
        # Zeroed before the depthwise convolution, so a valid frame near the end reads zeros past
        # it, not the padding's garbage.
        gated = (values * torch.sigmoid(gates)).masked_fill(padded, 0.0)
        convolved = self.depthwise(gated.transpose(1, 2)).transpose(1, 2)
        return self.dropout(self.output(nn.functional.silu(self.batchnorm(convolved, padded))))


def _xavier_uniform(weight: torch.Tensor, fan_in: int, fan_out: int) -> None:
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-limit, limit)
