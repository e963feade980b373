"""What one utterance costs a Conformer: forward FLOPs by part, and attention's memory.

Counted analytically from ``ConformerModelSpec`` (a multiply-add is 2 FLOPs) for T feature frames
of F bins: the subsampling convolutions over (T, F) halved per layer, then every block over the T'
subsampled frames. Only the matmuls and convolutions are counted: what PyTorch's FlopCounterMode
counts on the torch backend's model, attention's scores as the matmuls they are
(tests/test_conformer_cost.py). The elementwise work (LayerNorms, activations, the softmax,
BatchNorm) is a few FLOPs per value, some 50 thousand per frame and block at AlgoPerf's sizes
against some 12 million in matmuls, and is left out.

Attention is where a Conformer differs from the LSTM families: its scores and weighted sums grow
with T'^2, so long utterances cost quadratically more, and its probabilities (heads x T'^2 per
block) are the training step's largest activations for long utterances (``attention_bytes``).
"""

from __future__ import annotations

from benchbase.families.conformer.spec import ConformerModelSpec, subsampled_frames

__all__ = ["TRAINING_FACTOR", "attention_bytes", "forward_flops", "total_forward_flops", "training_flops"]

TRAINING_FACTOR = 3
"""Forward + backward, the backward pass counted as twice the forward."""


def forward_flops(model: ConformerModelSpec, feature_dimension: int, feature_frames: int) -> dict[str, int]:
    """Forward matmul and convolution FLOPs of one utterance of ``feature_frames`` frames, by part.

    Keys: ``subsampling`` (the 3x3 convolutions), ``projection`` (to encoder_dim),
    ``feed_forward`` (both modules of every block), ``attention_projections`` (queries, keys,
    values and the output projection), ``attention_scores`` (q k^T and the weighted sum of the
    values, quadratic in the frames), ``convolution_module`` (GLU projection, depthwise
    convolution, output projection) and ``output`` (the linear layer to the symbols).
    """
    d, hidden, channels = model.encoder_dim, model.encoder_dim * model.feed_forward_expansion, model.encoder_dim
    frames, bins, channels_in, subsampling = feature_frames, feature_dimension, 1, 0
    for _ in range(model.subsampling_layers):
        frames, bins = subsampled_frames(frames, 1), subsampled_frames(bins, 1)
        subsampling += 2 * frames * bins * channels * 9 * channels_in
        channels_in = channels
    blocks = model.encoder_layers
    return {
        "subsampling": subsampling,
        "projection": 2 * frames * bins * channels * d,
        "feed_forward": blocks * 2 * frames * (2 * d * hidden + 2 * hidden * d),
        "attention_projections": blocks * frames * (2 * d * 3 * d + 2 * d * d),
        "attention_scores": blocks * 2 * (2 * frames * frames * d),
        "convolution_module": blocks * frames * (2 * d * 2 * d + 2 * model.conv_kernel_size * d + 2 * d * d),
        "output": 2 * frames * d * model.symbols,
    }


def total_forward_flops(parts: dict[str, int]) -> int:
    return sum(parts.values())


def training_flops(model: ConformerModelSpec, feature_dimension: int, feature_frames: int, labels: int = 0) -> int:
    """Training FLOPs of one utterance: ``TRAINING_FACTOR`` x its forward count (CTC's cost does not
    depend on ``labels``)."""
    return TRAINING_FACTOR * total_forward_flops(forward_flops(model, feature_dimension, feature_frames))

def attention_bytes(model: ConformerModelSpec, feature_frames: int, bytes_per_value: int = 4) -> int:
    """The attention probabilities every block keeps for the backward pass: heads x T'^2 each."""
    frames = model.output_frames(feature_frames)
    return model.encoder_layers * model.attention_heads * frames * frames * bytes_per_value
