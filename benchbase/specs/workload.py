"""WorkloadSpec: everything that defines what is trained and how it is scored.

Every hyperparameter whose default differs between TensorFlow and PyTorch is a field here,
so that no backend ever falls back on its framework's default (docs/design.md).
"""

from __future__ import annotations

from typing import Literal, get_args, overload

import numpy as np
from pydantic import Field, model_validator

from benchbase.specs._base import Spec
from benchbase.specs.tta import TTARule

__all__ = [
    "BEAM_DECODERS",
    "DECODER_NAMES",
    "DataSpec",
    "DecoderName",
    "Deviation",
    "EvalSpec",
    "FeatureSpec",
    "GPU_ONLY_PRECISIONS",
    "PRECISIONS",
    "QUANTIZABLE_TENSORS",
    "ModelSpec",
    "OptimizerSpec",
    "Precision",
    "QuantizationSpec",
    "QuantizedTensor",
    "WorkloadSpec",
]


DecoderName = Literal["greedy", "beam", "word_beam"]
"""The one list of decoder names: the spec validates with it, the decoder factory and the CLI read it."""
DECODER_NAMES: tuple[str, ...] = get_args(DecoderName)
BEAM_DECODERS: tuple[str, ...] = tuple(name for name in DECODER_NAMES if name != "greedy")

Precision = Literal["fp32", "tf32", "bf16", "fp16", "int8-emulated"]
"""The one list of arithmetic precisions: the spec validates with it, the CLI and the harness read it."""
PRECISIONS: tuple[str, ...] = get_args(Precision)
GPU_ONLY_PRECISIONS: tuple[str, ...] = ("tf32", "fp16")
"""Precisions that exist only on GPU tensor cores: a CPU run of them is refused before the clock starts
(TF32 is a tensor-core format; fp16 on a CPU would be emulated and slower than fp32, so it measures nothing)."""

QuantizedTensor = Literal[
    "conv.input", "conv.kernel",
    "lstm.input", "lstm.input_kernel", "lstm.recurrent_state", "lstm.recurrent_kernel",
    "output.input", "output.kernel",
]
"""Every tensor ``int8-emulated`` can fake-quantize: each layer's input activation and its weight
matrix; ``lstm.*`` stands for every LSTM layer, ``lstm.recurrent_state`` for h(t-1) entering the
recurrent matmul at every frame."""
QUANTIZABLE_TENSORS: tuple[QuantizedTensor, ...] = get_args(QuantizedTensor)


class QuantizationSpec(Spec):
    """How ``precision: int8-emulated`` fake-quantizes the model: the one statement of the scheme.

    Every backend implements exactly this and ``benchbase.families.ds2.quantization`` is its NumPy reference.
    A fake-quantized tensor is ``clip(round(x / scale), -qmax, qmax) * scale`` with
    ``qmax = 2 ** (bits - 1) - 1`` (symmetric, so at most 2 ** bits - 1 distinct values, zero
    exact), rounding half to even, computed in float32. Biases, BatchNorm, the gates'
    nonlinearities, the cell state, the log-softmax and the loss stay float32, as on an
    accelerator with 32-bit accumulators.
    """

    bits: int = Field(8, ge=2, le=8, description="Bits of every fake-quantized tensor.")
    weights: Literal["symmetric_per_tensor_max"] = Field(
        "symmetric_per_tensor_max",
        description="A weight matrix's scale is max|W| / qmax over the whole tensor, from the float32 master "
        "weight at every forward pass (nothing is clipped).")
    activations: Literal["symmetric_per_tensor_moving_average"] = Field(
        "symmetric_per_tensor_moving_average",
        description="An input activation's scale is range / qmax, range a moving average of the batch's "
        "max|x| (every element of the tensor as the layer receives it: padded frames and dropout included, a "
        "backend's own extra padding excluded). Training: the first step sets range = max|x|, later steps "
        "range = momentum * range + (1 - momentum) * max|x|, and the step quantizes with the updated range. "
        "Inference quantizes with the stored range (max|x| of the batch while it is still 0). Values beyond "
        "the range saturate at +-qmax. Each range is model state, like BatchNorm's running statistics: "
        "checkpointed, and in the neutral weight layout as '<layer>.input_range'.")
    range_momentum: float = Field(
        0.99, gt=0.0, lt=1.0,
        description="Share of the old activation range kept per training step (Keras's convention, as "
        "batchnorm_momentum).")
    recurrent_state_range: float = Field(
        1.0, gt=0.0, le=16.0,
        description="Fixed range of the LSTM's h(t-1) entering the recurrent matmul: h = o * tanh(c) lies in "
        "(-1, 1) by construction, so it needs no statistics (an accelerator's static range).")
    gradient: Literal["straight_through"] = Field(
        "straight_through",
        description="The backward pass treats fake quantization as the identity inside the range and as zero "
        "where an activation saturated (clip's gradient); scales and ranges get no gradient.")
    tensors: tuple[QuantizedTensor, ...] = Field(
        QUANTIZABLE_TENSORS, min_length=1,
        description="The tensors fake-quantized in the forward pass: conv, every LSTM (input and recurrent "
        "matmuls) and the output layer, each layer's input activation and its weight matrix.")

    @property
    def qmax(self) -> int:
        return int(2 ** (self.bits - 1)) - 1

    def quantizes(self, tensor: str) -> bool:
        """Whether ``tensor`` (one of ``QUANTIZABLE_TENSORS``) is fake-quantized."""
        return tensor in self.tensors


class FeatureSpec(Spec):
    sample_rate: int = Field(16000, ge=8000, le=48000, description="Audio sample rate in Hz.")
    window: int = Field(512, ge=64, le=4096, description="STFT window (and FFT) size in samples.")
    hop: int = Field(160, ge=16, le=2048, description="Frame shift in samples (160 = 10 ms).")
    mel_bands: int = Field(80, ge=1, le=256, description="Number of log-mel bands.")
    mfcc: int = Field(13, ge=0, le=80, description="Number of MFCCs appended to the log-mel bands.")

    @property
    def dimension(self) -> int:
        """Features per frame: log-mel bands followed by MFCCs."""
        return self.mel_bands + self.mfcc


class ModelSpec(Spec):
    conv_channels: int = Field(description="Output channels of the 1-D convolution.", ge=1, le=4096)
    conv_width: int = Field(11, ge=1, le=64, description="Convolution width in frames.")
    conv_stride: int = Field(2, ge=1, le=8, description="Convolution stride in frames (valid padding).")
    conv_activation: Literal["relu", "clipped_relu"] = Field(
        "clipped_relu", description="Activation after the convolution; clipped_relu is min(max(x,0),20) as in DS2."
    )
    lstm_layers: int = Field(ge=1, le=16, description="Number of stacked unidirectional LSTM layers.")
    lstm_units: int = Field(ge=1, le=4096, description="Units per LSTM layer.")
    lstm_forget_bias: float = Field(
        1.0, ge=0.0, le=5.0, description="Initial forget-gate bias (Keras's unit_forget_bias; PyTorch starts at 0)."
    )
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout rate between layers.")
    batchnorm_momentum: float = Field(
        0.99,
        gt=0.0,
        lt=1.0,
        description="Share of the running BatchNorm statistics kept per update (Keras convention; "
        "PyTorch's momentum is 1 minus this).",
    )
    batchnorm_epsilon: float = Field(1e-5, gt=0.0, le=1e-1, description="BatchNorm epsilon.")
    batchnorm_frames: Literal["all_padded"] = Field(
        "all_padded",
        description="Frames BatchNorm's training statistics are taken over: every frame of the batch as the "
        "harness pads it, padding included (no mask), per channel over batch and time. Padding a backend adds "
        "for its own reasons (shape buckets) must be left out.",
    )
    batchnorm_variance: Literal["biased"] = Field(
        "biased",
        description="Variance BatchNorm normalizes with and folds into its running variance: the biased "
        "(population) variance of the batch. Keras and Flax do this; PyTorch's running variance would use "
        "the unbiased one.",
    )
    init: Literal["xavier_uniform"] = Field(
        "xavier_uniform",
        description="Initializer of every weight matrix (conv, LSTM input and recurrent, FC): Xavier-uniform over "
        "each whole matrix, an LSTM's four gates taken together (fan-out 4 x units); biases zero but the forget "
        "gate's.",
    )
    symbols: int = Field(30, ge=2, le=1024, description="Output symbols including the CTC blank.")
    ctc_blank_index: int = Field(0, ge=0, description="Index of the CTC blank in the output alphabet.")
    ctc_impossible_alignments: Literal["zero"] = Field(
        "zero",
        description="An utterance whose labels cannot be aligned within its output frames (CTC needs one frame "
        "per label plus one per repeated pair) adds zero loss and zero gradient (PyTorch's zero_infinity).",
    )
    precision: Precision = Field(
        "fp32",
        description="Arithmetic of training and evaluation. fp32: true IEEE float32 (no TF32 matmuls). tf32 "
        "(GPUs only): float32 with TF32 tensor-core matmuls and convolutions. bf16: automatic mixed precision, "
        "bfloat16 compute with float32 master weights, BatchNorm statistics and loss. fp16 (GPUs only): the same "
        "with float16 and dynamic loss scaling. int8-emulated: float32 arithmetic on fake-quantized weights and "
        "activations as `quantization` pins (an 8-bit accelerator's numbers, emulated).",
    )
    quantization: QuantizationSpec = Field(
        default_factory=QuantizationSpec,
        description="The fake-quantization scheme of precision int8-emulated (ignored by the other precisions).",
    )
    ctc_reduction: Literal["mean_over_batch"] = Field(
        "mean_over_batch",
        description="CTC loss reduction: each utterance's negative log-likelihood summed over its "
        "frames, averaged over the batch (PyTorch's 'mean' would also divide by label length).",
    )

    @model_validator(mode="after")
    def _blank_inside_alphabet(self) -> ModelSpec:
        if self.ctc_blank_index >= self.symbols:
            raise ValueError(f"ctc_blank_index {self.ctc_blank_index} is outside the {self.symbols} symbols")
        return self

    @overload
    def output_frames(self, input_frames: int) -> int: ...

    @overload
    def output_frames(self, input_frames: np.ndarray) -> np.ndarray: ...

    def output_frames(self, input_frames: int | np.ndarray) -> int | np.ndarray:
        """Frames after the valid, strided convolution (0 when the input is too short).

        The one source of this formula: the harness computes every batch's output lengths
        with it, and backends take them from the batch. Arrays give int32 arrays.
        """
        if isinstance(input_frames, np.ndarray):
            frames = (input_frames.astype(np.int64) - self.conv_width) // self.conv_stride + 1
            return np.maximum(frames, 0).astype(np.int32)
        if input_frames < self.conv_width:
            return 0
        return (input_frames - self.conv_width) // self.conv_stride + 1

    def parameter_count(self, feature_dimension: int) -> int:
        """Trainable parameters the layer sizes imply.

        The convolution has no bias (BatchNorm follows it); each LSTM gate has one bias, as
        in the textbook cell and Keras; BatchNorm contributes scale and shift.
        """
        conv = self.conv_width * feature_dimension * self.conv_channels
        inputs = [self.conv_channels] + [self.lstm_units] * (self.lstm_layers - 1)
        lstm = sum(4 * self.lstm_units * (size + self.lstm_units + 1) for size in inputs)
        batchnorm = 2 * self.conv_channels + 2 * self.lstm_units * self.lstm_layers
        output = self.lstm_units * self.symbols + self.symbols
        return conv + lstm + batchnorm + output


class OptimizerSpec(Spec):
    name: Literal["adadelta"] = Field("adadelta", description="Optimizer (the paper uses AdaDelta).")
    learning_rate: float = Field(
        1.0, gt=0.0, le=100.0, description="AdaDelta learning rate (PyTorch 1.0, Keras 0.001)."
    )
    rho: float = Field(0.95, gt=0.0, lt=1.0, description="AdaDelta decay rate (PyTorch 0.9, Keras 0.95).")
    epsilon: float = Field(1e-8, gt=0.0, le=1e-2, description="AdaDelta epsilon (PyTorch 1e-6, Keras 1e-7).")
    gradient_clip_norm: float | None = Field(
        None, gt=0.0, le=1e6, description="Global gradient-norm clip, or none."
    )


class DataSpec(Spec):
    dataset: Literal["synthetic", "librispeech"] = Field(description="Where the audio comes from.")
    train: tuple[str, ...] = Field(min_length=1, description="Subsets (LibriSpeech folder names) used for training.")
    dev: tuple[str, ...] = Field(min_length=1, description="Subsets evaluated every epoch, each on its own "
                                 "(never pooled); the TTA rule names the one it is scored on.")
    test: tuple[str, ...] = Field((), description="Subsets evaluated only once, after run_stop (untimed), "
                                  "beside every dev subset.")
    max_duration: float = Field(
        16.7, gt=0.0, le=120.0, description="Utterances longer than this (seconds) are dropped."
    )
    synthetic_utterances: int = Field(
        3000, ge=10, le=1_000_000, description="Corpus size when the dataset is synthesized."
    )
    length_buckets: int = Field(
        0,
        ge=0,
        le=10_000,
        description="0: a shuffle buffer over shards. N > 0: sort the split by length into N buckets, "
        "batch within buckets, shuffle within buckets and across batches (as MLPerf's RNN-T reference).",
    )
    pad_to_frames: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Pad every batch to this many frames (the paper: 1670), or None: to the batch's longest.",
    )


class EvalSpec(Spec):
    every_epochs: int = Field(1, ge=1, le=100, description="Evaluate on the dev split every this many epochs.")
    decoder: DecoderName = Field(
        "greedy", description="Decoder used for evaluation: greedy (best path), beam (prefix beam search) or "
        "word_beam (word beam search over the training transcripts' dictionary, the paper's).")
    beam_width: int = Field(1, ge=1, le=8192, description="Beam width of the evaluation decoder.")
    lm_mode: Literal["words", "bigrams"] = Field(
        "bigrams", description="Word beam search's language model: words (unigram) or bigrams.")
    lm_alpha: float = Field(0.5, ge=0.0, le=10.0, description="Weight of the language model's log-probability "
                            "in word beam search (shallow fusion).")
    lm_beta: float = Field(0.0, ge=-20.0, le=20.0, description="Score added per word in word beam search.")
    final_decoder: DecoderName | None = Field(
        None, description="Decoder of the final evaluation after run_stop (the paper's Table 5: word_beam); "
        "none: the evaluation decoder.")
    final_beam_width: int | None = Field(
        None, ge=1, le=8192, description="Beam width of the final evaluation (the paper's Table 5: 512); none: "
        "the evaluation beam width.")
    log_sentences_every: int = Field(
        50, ge=1, le=100_000, description="Greedy-decode training sentences every N batches."
    )
    checkpoint_every: int = Field(250, ge=1, le=1_000_000, description="Write a checkpoint every N batches.")
    independent_utterances: int = Field(
        8, ge=0, le=100_000, description="Independent scoring: after each evaluation, off the clock, benchbase's "
        "reference model re-scores this many utterances of the scored subset (a sample the backend cannot "
        "know in advance) from the backend's exported weights, and predict() must agree with it. 0: off, "
        "which puts a run in the open division (for a backend whose model is not the workload's).")
    independent_final_utterances: int | None = Field(
        None, ge=1, le=1_000_000, description="Independent scoring at the final evaluation: utterances of the "
        "scored subset re-scored; none: all of them.")


class Deviation(Spec):
    """One way a workload departs from its reference (or a choice the reference leaves open)."""

    field: str = Field(min_length=1, max_length=120, description="Dotted spec field, or a topic where no field is.")
    reference: str = Field(max_length=300, description="What the reference does (or 'not stated').")
    benchbase: str = Field(min_length=1, max_length=300, description="What this workload does instead.")
    why: str = Field(min_length=1, max_length=1000, description="Why, and what evidence supports the choice.")


class WorkloadSpec(Spec):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="Workload name.")
    description: str = Field("", max_length=500, description="One line for `benchbase workloads`.")
    model: ModelSpec = Field(description="Acoustic model.")
    features: FeatureSpec = Field(default_factory=FeatureSpec, description="Feature extraction.")
    data: DataSpec = Field(description="Dataset, splits and filters.")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimizer and its pinned settings.")
    evaluation: EvalSpec = Field(default_factory=EvalSpec, description="Evaluation cadence and decoder.")
    tta: TTARule = Field(description="Time-to-accuracy targets and window.")
    max_epochs: int = Field(ge=1, le=10_000, description="Stop (status aborted) after this many epochs.")
    max_minutes: float = Field(
        ge=0.01, le=100_000.0, description="Stop (status aborted) after this many minutes on the run clock."
    )
    reference: str = Field("", max_length=300, description="What the workload reproduces (a paper, a benchmark).")
    deviations: tuple[Deviation, ...] = Field(
        (), max_length=64, description="Every way the workload departs from its reference, declared.")

    @property
    def scored_subset(self) -> str:
        """The dev subset TTA is scored on."""
        return self.tta.subset or self.data.dev[0]

    @model_validator(mode="after")
    def _tta_subset_is_a_dev_subset(self) -> WorkloadSpec:
        subset, dev = self.tta.subset, self.data.dev
        if subset is None and len(dev) > 1:
            raise ValueError(f"tta.subset must name the dev subset the targets are scored on, one of {list(dev)}")
        if subset is not None and subset not in dev:
            raise ValueError(f"tta.subset {subset!r} is not a dev subset ({', '.join(dev)})")
        if len(set(dev + self.data.test)) != len(dev) + len(self.data.test):
            raise ValueError(f"dev and test subsets repeat: {list(dev + self.data.test)}")
        return self

    @model_validator(mode="after")
    def _padding_holds_the_longest_utterance(self) -> WorkloadSpec:
        pad_to = self.data.pad_to_frames
        longest = (int(self.data.max_duration * self.features.sample_rate - self.features.window)
                   // self.features.hop + 1)
        if pad_to is not None and pad_to < longest:
            raise ValueError(f"data.pad_to_frames {pad_to} is shorter than a {self.data.max_duration} s utterance "
                             f"({longest} frames)")
        return self
