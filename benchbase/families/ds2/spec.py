"""The DS2 family's model spec: the layer sizes and the conventions of the paper's acoustic model.

conv1d (valid, strided) -> BatchNorm -> clipped ReLU -> [LSTM -> BatchNorm] x layers -> dense,
trained with CTC. Every field whose default differs between frameworks is pinned here (the
description says what each framework does by default), so no backend falls back on its own.
"""

from __future__ import annotations

from typing import Literal, get_args, overload

import numpy as np
from pydantic import Field, model_validator

from benchbase.specs.model import ModelSpec

__all__ = ["QUANTIZABLE_TENSORS", "DS2ModelSpec", "QuantizedTensor"]

QuantizedTensor = Literal[
    "conv.input", "conv.kernel",
    "lstm.input", "lstm.input_kernel", "lstm.recurrent_state", "lstm.recurrent_kernel",
    "output.input", "output.kernel",
]
"""Every DS2 tensor ``int8-emulated`` can fake-quantize: each layer's input activation and its weight
matrix; ``lstm.*`` stands for every LSTM layer, ``lstm.recurrent_state`` for h(t-1) entering the
recurrent matmul at every frame."""
QUANTIZABLE_TENSORS: tuple[str, ...] = get_args(QuantizedTensor)


class DS2ModelSpec(ModelSpec):
    """Deep Speech 2 as the paper trains it (a workload's ``model`` without ``family`` is one)."""

    family: Literal["ds2"] = Field("ds2", description="Model family: ds2, the paper's CTC acoustic model.")
    conv_channels: int = Field(description="Output channels of the 1-D convolution.", ge=1, le=4096)
    conv_width: int = Field(11, ge=1, le=64, description="Convolution width in frames.")
    conv_stride: int = Field(2, ge=1, le=8, description="Convolution stride in frames (valid padding).")
    conv_activation: Literal["relu", "clipped_relu"] = Field(
        "clipped_relu", description="Activation after the convolution; clipped_relu is min(max(x,0),20) as in DS2.")
    lstm_layers: int = Field(ge=1, le=16, description="Number of stacked unidirectional LSTM layers.")
    lstm_units: int = Field(ge=1, le=4096, description="Units per LSTM layer.")
    lstm_forget_bias: float = Field(
        1.0, ge=0.0, le=5.0, description="Initial forget-gate bias (Keras's unit_forget_bias; PyTorch starts at 0).")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout rate between layers.")
    batchnorm_momentum: float = Field(
        0.99, gt=0.0, lt=1.0,
        description="Share of the running BatchNorm statistics kept per update (Keras convention; "
        "PyTorch's momentum is 1 minus this).")
    batchnorm_epsilon: float = Field(1e-5, gt=0.0, le=1e-1, description="BatchNorm epsilon.")
    batchnorm_frames: Literal["all_padded"] = Field(
        "all_padded",
        description="Frames BatchNorm's training statistics are taken over: every frame of the batch as the "
        "harness pads it, padding included (no mask), per channel over batch and time. Padding a backend adds "
        "for its own reasons (shape buckets) must be left out.")
    batchnorm_variance: Literal["biased"] = Field(
        "biased",
        description="Variance BatchNorm normalizes with and folds into its running variance: the biased "
        "(population) variance of the batch. Keras and Flax do this; PyTorch's running variance would use "
        "the unbiased one.")
    init: Literal["xavier_uniform"] = Field(
        "xavier_uniform",
        description="Initializer of every weight matrix (conv, LSTM input and recurrent, FC): Xavier-uniform over "
        "each whole matrix, an LSTM's four gates taken together (fan-out 4 x units); biases zero but the forget "
        "gate's.")
    ctc_blank_index: int = Field(0, ge=0, description="Index of the CTC blank in the output alphabet.")
    ctc_impossible_alignments: Literal["zero"] = Field(
        "zero",
        description="An utterance whose labels cannot be aligned within its output frames (CTC needs one frame "
        "per label plus one per repeated pair) adds zero loss and zero gradient (PyTorch's zero_infinity).")
    ctc_reduction: Literal["mean_over_batch"] = Field(
        "mean_over_batch",
        description="CTC loss reduction: each utterance's negative log-likelihood summed over its "
        "frames, averaged over the batch (PyTorch's 'mean' would also divide by label length).")

    quantizable_tensors = QUANTIZABLE_TENSORS

    @model_validator(mode="after")
    def _blank_inside_alphabet(self) -> DS2ModelSpec:
        if self.ctc_blank_index >= self.symbols:
            raise ValueError(f"ctc_blank_index {self.ctc_blank_index} is outside the {self.symbols} symbols")
        return self

    @property
    def blank_index(self) -> int:
        return self.ctc_blank_index

    @overload
    def output_frames(self, input_frames: int) -> int: ...

    @overload
    def output_frames(self, input_frames: np.ndarray) -> np.ndarray: ...

    def output_frames(self, input_frames: int | np.ndarray) -> int | np.ndarray:
        """Frames after the valid, strided convolution (0 when the input is too short)."""
        if isinstance(input_frames, np.ndarray):
            frames = (input_frames.astype(np.int64) - self.conv_width) // self.conv_stride + 1
            return np.maximum(frames, 0).astype(np.int32)
        if input_frames < self.conv_width:
            return 0
        return (input_frames - self.conv_width) // self.conv_stride + 1

    def input_frames_for(self, output_frames: int) -> int:
        return self.conv_width + (output_frames - 1) * self.conv_stride

    def keeps_utterance(self, input_frames: int, labels: int) -> bool:
        return self.output_frames(input_frames) >= labels

    def store_shaping(self) -> dict[str, object]:
        return {"conv": [self.conv_width, self.conv_stride]}

    def parameter_count(self, feature_dimension: int) -> int:
        """The convolution has no bias (BatchNorm follows it); each LSTM gate has one bias, as
        in the textbook cell and Keras; BatchNorm contributes scale and shift."""
        conv = self.conv_width * feature_dimension * self.conv_channels
        inputs = [self.conv_channels] + [self.lstm_units] * (self.lstm_layers - 1)
        lstm = sum(4 * self.lstm_units * (size + self.lstm_units + 1) for size in inputs)
        batchnorm = 2 * self.conv_channels + 2 * self.lstm_units * self.lstm_layers
        output = self.lstm_units * self.symbols + self.symbols
        return conv + lstm + batchnorm + output
