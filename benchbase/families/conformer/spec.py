"""ConformerModelSpec: the Conformer family's model spec (``family: conformer``), sized like
MLCommons AlgoPerf's ``librispeech_conformer`` workload by default.

    features (frames, F), paddings
      -> [3x3 convolution, stride 2 in time and frequency, ReLU, padded frames zeroed] x subsampling_layers
      -> flatten (frequency, channel) -> Linear to encoder_dim -> + sinusoidal positions -> dropout
      -> [Conformer block] x encoder_layers -> LayerNorm -> Linear to symbols -> log-softmax   (CTC)

    Conformer block (post-LN, AlgoPerf's):
      x += 0.5 FFN(x)        FFN: LayerNorm -> Linear(d, 4d) -> swish -> mask -> Linear(4d, d) -> mask
      x += MHSA(LN x)        the keys of padded frames masked out; a learned per-dimension query scale
      x += Conv(x)           LayerNorm -> GLU(Linear, Linear) -> mask -> depthwise conv -> BatchNorm over
                             the utterances' own frames -> swish -> Linear
      x += 0.5 FFN(x)
      x = LayerNorm(x)
    dropout (training only) on each residual branch's output and on the subsampled input

LayerNorm is ``(x - mean) / sqrt(var + eps) * (1 + scale) + bias`` (scale initialised to 0), and
so is BatchNorm's affine part. Defining the class registers the family. The NumPy reference is
``benchbase.families.conformer.reference``, the weight layout ``benchbase.families.conformer.weight_layout``.
"""

from __future__ import annotations

from typing import ClassVar, Literal, overload

import numpy as np
from pydantic import Field, model_validator

from benchbase.specs.model import ModelSpec

__all__ = ["ConformerModelSpec", "subsampled_frames"]


class ConformerModelSpec(ModelSpec):
    """A Conformer encoder with a CTC head (Gulati et al. 2020, as AlgoPerf trains it)."""

    family: Literal["conformer"] = Field("conformer", description="Model family: the Conformer (CTC).")
    encoder_dim: int = Field(512, ge=2, le=4096, description="Width of every Conformer block (AlgoPerf: 512).")
    attention_heads: int = Field(
        8, ge=1, le=64, description="Heads of each self-attention; must divide encoder_dim (AlgoPerf: 8).")
    encoder_layers: int = Field(4, ge=1, le=64, description="Conformer blocks (AlgoPerf: 4).")
    feed_forward_expansion: int = Field(
        4, ge=1, le=16, description="Hidden width of each feed-forward module over encoder_dim (AlgoPerf: 4).")
    conv_kernel_size: int = Field(
        5, ge=1, le=63,
        description="Width in frames of each block's depthwise convolution, odd, zero-padded (kernel_size - 1) / 2 "
        "frames on each side (AlgoPerf: 5).")
    subsampling_layers: Literal[1, 2] = Field(
        2,
        description="3x3 convolutions of stride 2 before the blocks (AlgoPerf: 2, four times fewer frames), each "
        "with encoder_dim output channels, a bias and a ReLU. Each reads input rows 2i, 2i+1 and 2i+2 of both "
        "axes, zeros past the end (TensorFlow's SAME padding of an even length): an utterance's output does not "
        "depend on how long the batch it is padded in is (AlgoPerf's SAME padding of an odd padded length reads "
        "rows 2i-1 .. 2i+1, so it does).")
    batchnorm_momentum: float = Field(
        0.999, gt=0.0, lt=1.0,
        description="Share of the convolution module's running BatchNorm statistics kept per update (Keras "
        "convention; AlgoPerf: 0.999).")
    batchnorm_epsilon: float = Field(1e-3, gt=0.0, le=1.0, description="BatchNorm's epsilon (AlgoPerf: 1e-3).")
    layernorm_epsilon: float = Field(1e-6, gt=0.0, le=1.0, description="Every LayerNorm's epsilon (AlgoPerf: 1e-6).")
    dropout: float = Field(
        0.1, ge=0.0, lt=1.0,
        description="Dropout rate on the subsampled input and on each residual branch's output, in training only "
        "(AlgoPerf: 0.1; its attention and feed-forward inner dropouts are 0 and are not modelled).")
    max_timescale: float = Field(
        10_000.0, gt=1.0, le=1e9,
        description="The sinusoidal positions' longest timescale: position p, dimension k < d/2 gets sin(p w_k), "
        "dimension d/2 + k cos(p w_k), w_k = max_timescale ** (-k / (d/2 - 1)) (AlgoPerf: 10000), computed in "
        "float64 and rounded once to the model's type (AlgoPerf computes the angles in float32, whose error "
        "grows with the position).")
    init: Literal["xavier_uniform"] = Field(
        "xavier_uniform",
        description="Initializer of every kernel: Xavier-uniform (a convolution's fans are its receptive field "
        "times its channels, the depthwise one's its width); biases, LayerNorm and BatchNorm scales and offsets "
        "and the query scales zero; running means zero, variances one.")
    ctc_blank_index: int = Field(0, ge=0, description="Index of the CTC blank among the symbols (AlgoPerf: 0).")
    ctc_impossible_alignments: Literal["zero"] = Field(
        "zero", description="An utterance whose labels cannot be aligned within its output frames adds zero "
        "loss and zero gradient.")

    quantizable_tensors: ClassVar[tuple[str, ...]] = ()  # no int8-emulated for this family

    @model_validator(mode="after")
    def _consistent(self) -> ConformerModelSpec:
        if self.encoder_dim % self.attention_heads:
            raise ValueError(f"attention_heads {self.attention_heads} does not divide encoder_dim {self.encoder_dim}")
        if self.encoder_dim % 2:
            raise ValueError(f"encoder_dim {self.encoder_dim} must be even (sinusoidal positions: sin and cos halves)")
        if self.conv_kernel_size % 2 == 0:
            raise ValueError(f"conv_kernel_size {self.conv_kernel_size} must be odd")
        if self.ctc_blank_index >= self.symbols:
            raise ValueError(f"ctc_blank_index {self.ctc_blank_index} is outside the {self.symbols} symbols")
        return self

    @property
    def blank_index(self) -> int:
        return self.ctc_blank_index

    @property
    def head_dim(self) -> int:
        return self.encoder_dim // self.attention_heads

    @overload
    def output_frames(self, input_frames: int) -> int: ...

    @overload
    def output_frames(self, input_frames: np.ndarray) -> np.ndarray: ...

    def output_frames(self, input_frames: int | np.ndarray) -> int | np.ndarray:
        """ceil(T / 2) once per subsampling layer: an output frame is valid when the input row it
        starts at (2i) is."""
        return subsampled_frames(input_frames, self.subsampling_layers)

    def input_frames_for(self, output_frames: int) -> int:
        frames = output_frames
        for _ in range(self.subsampling_layers):
            frames = 2 * frames - 1 if frames > 0 else 0
        return frames

    def keeps_utterance(self, input_frames: int, labels: int) -> bool:
        return self.output_frames(input_frames) >= labels  # CTC: an output frame per label at least

    def store_shaping(self) -> dict[str, object]:
        return {"output_frames": f"ceil(T/2) x {self.subsampling_layers}"}

    def subsampled_bins(self, feature_dimension: int) -> int:
        """Frequency rows left after the subsampling convolutions (ceil(F / 2) each)."""
        return int(subsampled_frames(feature_dimension, self.subsampling_layers))

    def parameter_count(self, feature_dimension: int) -> int:
        """Trainable parameters the sizes imply (running statistics are state, not parameters)."""
        d, hidden, kernel = self.encoder_dim, self.encoder_dim * self.feed_forward_expansion, self.conv_kernel_size
        subsampling = (9 * d + d) + (self.subsampling_layers - 1) * (9 * d * d + d)
        projection = self.subsampled_bins(feature_dimension) * d * d + d
        feed_forward = 2 * d + (d * hidden + hidden) + (hidden * d + d)
        attention = 2 * d + (d * 3 * d + 3 * d) + self.head_dim + (d * d + d)
        convolution = 2 * d + (d * 2 * d + 2 * d) + kernel * d + 2 * d + (d * d + d)
        block = 2 * feed_forward + attention + convolution + 2 * d
        head = 2 * d + d * self.symbols + self.symbols
        return subsampling + projection + self.encoder_layers * block + head


@overload
def subsampled_frames(frames: int, layers: int) -> int: ...


@overload
def subsampled_frames(frames: np.ndarray, layers: int) -> np.ndarray: ...


def subsampled_frames(frames: int | np.ndarray, layers: int) -> int | np.ndarray:
    """ceil(frames / 2), ``layers`` times."""
    if isinstance(frames, np.ndarray):
        result = frames.astype(np.int64)
        for _ in range(layers):
            result = (result + 1) // 2
        return result.astype(np.int32)
    for _ in range(layers):
        frames = (frames + 1) // 2
    return frames
