"""conformer-mini's shapes and one random batch, framework-free: what every framework's module
builds and trains on. tests/test_standalone_conformer.py holds the constants to the registered
workload and the cpu hardware profile, so they cannot drift from them."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

# conformer-mini's model (benchbase/workloads/conformer-mini.yaml), field by field:
ENCODER_DIM = 48  # model.encoder_dim
ATTENTION_HEADS = 4  # model.attention_heads
ENCODER_LAYERS = 3  # model.encoder_layers
FEED_FORWARD_EXPANSION = 2  # model.feed_forward_expansion
CONV_KERNEL_SIZE = 5  # model.conv_kernel_size
SUBSAMPLING_LAYERS = 1  # model.subsampling_layers
DROPOUT = 0.1  # model.dropout
SYMBOLS = 30  # model.symbols
BLANK = 0  # model.ctc_blank_index
LAYERNORM_EPSILON = 1e-6  # model.layernorm_epsilon
BATCHNORM_MOMENTUM = 0.999  # model.batchnorm_momentum (the share of the running statistics kept)
BATCHNORM_EPSILON = 1e-3  # model.batchnorm_epsilon
MAX_TIMESCALE = 10_000.0  # model.max_timescale
FEATURES = 80  # features.mel_bands + features.mfcc
# Its optimizer (the schedule's rate changes no step's time, so the peak rate is used throughout):
LEARNING_RATE = 2e-3  # optimizer.learning_rate
BETA1 = 0.9  # optimizer.beta1
BETA2 = 0.98  # optimizer.beta2
EPSILON = 1e-9  # optimizer.epsilon
WEIGHT_DECAY = 1e-2  # optimizer.weight_decay
CLIP_NORM = 5.0  # optimizer.gradient_clip_norm
# The batch: utterances a step (the cpu hardware profile's pipeline.global_batch, which the parity
# matrix trains with), padded to the matrix's median frame count (docs/BENCHMARKS.md, "Framework
# parity: the matrix"; a measurement of the synthetic corpus's batches, not a spec field).
BATCH = 32  # hardware_profiles/cpu.yaml, pipeline.global_batch
FRAMES = 418
LENGTHS = (0.45, 0.85)
"""The first utterance is FRAMES long, the others drawn uniformly from these shares of FRAMES: 188
to 355 frames, where the training split's utterances have 145 to 517, 197 at p10, 257 at the
median and 344 at p90."""
LABELS_PER_OUTPUT_FRAME = 1 / 3
"""Labels per output frame: the training split has 3.1 output frames per character on average."""

HEAD_DIM = ENCODER_DIM // ATTENTION_HEADS
HIDDEN = ENCODER_DIM * FEED_FORWARD_EXPANSION


def subsampled(frames: int | np.ndarray) -> int | np.ndarray:
    """ceil(frames / 2) per subsampling layer (a 3x3 stride-2 convolution with SAME padding)."""
    for _ in range(SUBSAMPLING_LAYERS):
        frames = (frames + 1) // 2
    return frames


PROJECTED = subsampled(FEATURES) * ENCODER_DIM
"""The subsampling's Linear reads frequency rows x channels (1920 features a frame)."""


class Batch(NamedTuple):
    features: np.ndarray  # (BATCH, FRAMES, FEATURES) float32, zeros past each row's length
    feature_lengths: np.ndarray  # (BATCH,) int32, each row's frames
    output_lengths: np.ndarray  # (BATCH,) int32, each row's frames after the subsampling
    labels: np.ndarray  # (BATCH, longest label) int32 in 1 .. SYMBOLS - 1, BLANK past each row's length
    label_lengths: np.ndarray  # (BATCH,) int32


def random_batch(seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(int(LENGTHS[0] * FRAMES), int(LENGTHS[1] * FRAMES) + 1, BATCH)
    lengths[0] = FRAMES
    features = rng.standard_normal((BATCH, FRAMES, FEATURES), dtype=np.float32)
    features[np.arange(FRAMES)[None, :] >= lengths[:, None]] = 0.0
    output_lengths = subsampled(lengths).astype(np.int32)
    label_lengths = np.maximum((output_lengths * LABELS_PER_OUTPUT_FRAME).astype(np.int32), 1)
    labels = rng.integers(1, SYMBOLS, (BATCH, label_lengths.max())).astype(np.int32)
    labels[np.arange(labels.shape[1])[None, :] >= label_lengths[:, None]] = BLANK
    return Batch(features, lengths.astype(np.int32), output_lengths, labels, label_lengths)


def key_valid(output_lengths: np.ndarray) -> np.ndarray:
    """(batch, 1, 1, keys) bool: True where a key may be attended (a frame of the row's own)."""
    return (np.arange(int(output_lengths.max()))[None, :] < output_lengths[:, None])[:, None, None, :]


def sinusoids(frames: int) -> np.ndarray:
    """(frames, ENCODER_DIM) float32 positions: sin(p w_k), then cos(p w_k)."""
    half = ENCODER_DIM // 2
    inverse = np.exp(np.arange(half) * -(math.log(MAX_TIMESCALE) / max(half - 1, 1)))
    angles = np.arange(frames)[:, None] * inverse[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


# The operations timed alone, at the model's shapes (BATCH x the output frames), each forward and
# backward; a framework's ``operations`` has those it has a variant for.
OP_PROJECTION = f"projection Linear {PROJECTED}->{ENCODER_DIM}"
OP_FEED_FORWARD = f"feed-forward Linear {ENCODER_DIM}->{HIDDEN}, swish, Linear {HIDDEN}->{ENCODER_DIM}"
OP_QKV = f"attention qkv Linear {ENCODER_DIM}->{3 * ENCODER_DIM}"
OP_OUTPUT = f"attention output Linear {ENCODER_DIM}->{ENCODER_DIM}"
OP_SDPA = f"attention {ATTENTION_HEADS}x{HEAD_DIM}, key mask: scaled_dot_product_attention"
OP_ATTENTION = f"attention {ATTENTION_HEADS}x{HEAD_DIM}, key mask: products + softmax"
OP_DOT_PRODUCT = f"attention {ATTENTION_HEADS}x{HEAD_DIM}, key mask: jax.nn.dot_product_attention"
OP_DEPTHWISE = f"depthwise conv {CONV_KERNEL_SIZE} + BatchNorm"
OP_DEPTHWISE_SHIFTS = f"depthwise conv {CONV_KERNEL_SIZE} as shifted products + BatchNorm"
OP_SUBSAMPLING = f"subsampling conv 3x3/2 1->{ENCODER_DIM} + ReLU"
OP_SUBSAMPLING_LAST = f"subsampling conv 3x3/2 1->{ENCODER_DIM} + ReLU, channels-last"
OPERATIONS = (OP_PROJECTION, OP_FEED_FORWARD, OP_QKV, OP_OUTPUT, OP_SDPA, OP_ATTENTION, OP_DOT_PRODUCT, OP_DEPTHWISE,
              OP_DEPTHWISE_SHIFTS, OP_SUBSAMPLING, OP_SUBSAMPLING_LAST)
