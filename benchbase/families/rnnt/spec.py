"""RNNTModelSpec: the RNN-T family's model spec (``family: rnnt``), sized like MLPerf Training's
speech reference by default.

    features (frames, F)
      -> input stacking: input_stack consecutive frames concatenated, every input_subsample-th window
      -> [LSTM] x encoder_pre_layers -> time stacking (stack_time_factor frames concatenated)
      -> [LSTM] x encoder_post_layers -> joint.encoder projection         f(t)   (T', joint_units)
    start symbol (the blank), labels
      -> embedding -> [LSTM] x prediction_layers                          g(u)   (U + 1, prediction_units)
    joint: log_softmax(output(activation(f(t) + joint.prediction(g(u)))))   (T', U + 1, symbols)

Defining the class registers the family (``ModelSpec.__pydantic_init_subclass__``). The
NumPy reference of the whole model is ``benchbase.families.rnnt.reference``, its weight
layout ``benchbase.families.rnnt.weight_layout``.
"""

from __future__ import annotations

from typing import ClassVar, Literal, overload

import numpy as np
from pydantic import Field, model_validator

from benchbase.specs.model import ModelSpec

__all__ = ["RNNTModelSpec", "stacked_frames"]

_LSTM_TENSORS = ("input", "input_kernel", "recurrent_kernel", "recurrent_state")
_JOINT_TENSORS = ("input", "kernel")


class RNNTModelSpec(ModelSpec):
    """The RNN transducer: an LSTM encoder with time stacking, an LSTM prediction network and a
    joint network, trained with the transducer loss (Graves 2012)."""

    family: Literal["rnnt"] = Field("rnnt", description="Model family: the RNN transducer.")
    input_stack: int = Field(
        3, ge=1, le=16,
        description="Consecutive feature frames concatenated into one encoder input frame (MLPerf: 3, in its "
        "feature pipeline). The window at output frame j holds frames j * input_subsample + 0 .. input_stack - 1, "
        "in time order along the feature axis; only whole windows of the utterance's own frames count.")
    input_subsample: int = Field(
        3, ge=1, le=16, description="Stride in frames between consecutive input windows (MLPerf: 3).")
    encoder_pre_layers: int = Field(
        2, ge=1, le=16, description="Unidirectional LSTM layers before time stacking (MLPerf: 2).")
    stack_time_factor: int = Field(
        2, ge=1, le=16,
        description="Consecutive pre-network frames concatenated into one post-network frame (MLPerf: 2). "
        "Floor: an utterance's trailing frames that do not fill a whole group are dropped, so that every "
        "stacked frame is made of the utterance's own frames and never of padding (MLPerf's ceil pads the "
        "last group with the batch's next frame, which depends on the batch).")
    encoder_post_layers: int = Field(
        3, ge=1, le=16, description="Unidirectional LSTM layers after time stacking (MLPerf: 3).")
    encoder_units: int = Field(1024, ge=1, le=8192, description="Units of every encoder LSTM layer (MLPerf: 1024).")
    prediction_embedding: int = Field(
        512, ge=1, le=8192,
        description="Width of the prediction network's symbol embedding (MLPerf: 512). The table has a row for "
        "every symbol, the blank's included: the blank's row is the start-of-sequence input.")
    prediction_layers: int = Field(2, ge=1, le=16, description="LSTM layers of the prediction network (MLPerf: 2).")
    prediction_units: int = Field(512, ge=1, le=8192, description="Units of every prediction LSTM (MLPerf: 512).")
    joint_units: int = Field(512, ge=1, le=8192, description="Width of the joint network's hidden layer (MLPerf: 512).")
    joint_activation: Literal["relu", "tanh"] = Field(
        "relu", description="Nonlinearity of the joint's hidden layer: relu (MLPerf) or tanh (Graves 2013).")
    dropout: float = Field(
        0.1, ge=0.0, lt=1.0,
        description="Dropout rate between consecutive LSTM layers (encoder and prediction network) and on the "
        "joint's hidden layer, in training only.")
    lstm_forget_bias: float = Field(
        1.0, ge=0.0, le=5.0,
        description="Initial forget-gate bias of every LSTM (MLPerf: 1.0; one bias per gate, as in Keras).")
    init: Literal["xavier_uniform"] = Field(
        "xavier_uniform",
        description="Initializer of every weight matrix (LSTM input and recurrent kernels, joint kernels, the "
        "embedding table): Xavier-uniform over each whole matrix in the neutral layout, fan-in its rows and "
        "fan-out its columns (an LSTM's four gates taken together); biases zero but the forget gate's "
        "(lstm_forget_bias). MLPerf keeps PyTorch's defaults, U(+-1/sqrt(units)); Xavier is pinned because "
        "it is one formula in every framework.")
    transducer_blank_index: int = Field(
        0, ge=0, le=1023,
        description="Index of the transducer's blank (no emission at this frame) among the symbols; it is "
        "also the prediction network's start-of-sequence symbol (torchaudio's convention; MLPerf feeds a "
        "zero vector instead).")
    transducer_impossible_alignments: Literal["zero"] = Field(
        "zero",
        description="An utterance with no output frame (too short for the model) has no alignment, since every "
        "alignment ends with a blank at the last frame; it adds zero loss and zero gradient. With one frame "
        "or more every label sequence has an alignment (a frame may emit any number of labels).")
    loss_reduction: Literal["mean_over_batch"] = Field(
        "mean_over_batch",
        description="The batch loss: each utterance's negative log-likelihood summed and divided by the batch "
        "size (not by label lengths).")

    max_symbols_per_frame: int = Field(
        30, ge=1, le=1000,
        description="Labels the greedy search emits at most at one encoder frame before it moves on to the next "
        "(MLPerf's greedy decoder: 30); the blank moves on sooner.")

    evaluation_decoders: ClassVar[tuple[str, ...] | None] = ("greedy",)  # the transducer search; no beam yet
    quantizable_tensors: ClassVar[tuple[str, ...]] = (
        *(f"encoder.lstm.{tensor}" for tensor in _LSTM_TENSORS),
        *(f"prediction.lstm.{tensor}" for tensor in _LSTM_TENSORS),
        *(f"joint.{layer}.{tensor}" for layer in ("encoder", "prediction", "output") for tensor in _JOINT_TENSORS),
    )

    @model_validator(mode="after")
    def _blank_is_a_symbol(self) -> RNNTModelSpec:
        if self.transducer_blank_index >= self.symbols:
            raise ValueError(f"transducer_blank_index {self.transducer_blank_index} is not among the "
                             f"{self.symbols} symbols")
        return self

    @property
    def blank_index(self) -> int:
        return self.transducer_blank_index

    @overload
    def output_frames(self, input_frames: int) -> int: ...

    @overload
    def output_frames(self, input_frames: np.ndarray) -> np.ndarray: ...

    def output_frames(self, input_frames: int | np.ndarray) -> int | np.ndarray:
        """Encoder frames T' for ``input_frames`` feature frames: whole input windows, then whole
        time-stacking groups, ``floor(stacked_frames(T, input_stack, input_subsample) / stack_time_factor)``.

        The one source of this formula: the harness computes every batch's output lengths with
        it. Arrays give int32 arrays; 0 means the utterance is too short for the model.
        """
        windows = stacked_frames(input_frames, self.input_stack, self.input_subsample)
        if isinstance(windows, np.ndarray):
            return (windows // self.stack_time_factor).astype(np.int32)
        return windows // self.stack_time_factor

    def input_frames_for(self, output_frames: int) -> int:
        windows = output_frames * self.stack_time_factor
        return self.input_stack + (windows - 1) * self.input_subsample

    def keeps_utterance(self, input_frames: int, labels: int) -> bool:
        return self.output_frames(input_frames) >= 1  # a frame may emit any number of labels

    def store_shaping(self) -> dict[str, object]:
        return {"transducer_frames": [self.input_stack, self.input_subsample, self.stack_time_factor]}

    def encoder_input_dimension(self, feature_dimension: int) -> int:
        """Width of the first encoder LSTM's input: ``input_stack`` feature frames side by side."""
        return self.input_stack * feature_dimension

    def parameter_count(self, feature_dimension: int) -> int:
        """Trainable parameters the layer sizes imply: one bias per LSTM gate (Keras's cell; PyTorch's
        has two, 4 x units more per layer), the embedding's row for the blank included."""
        encoder_inputs = ([self.encoder_input_dimension(feature_dimension)]
                          + [self.encoder_units] * (self.encoder_pre_layers - 1)
                          + [self.stack_time_factor * self.encoder_units]
                          + [self.encoder_units] * (self.encoder_post_layers - 1))
        prediction_inputs = [self.prediction_embedding] + [self.prediction_units] * (self.prediction_layers - 1)
        encoder = sum(_lstm_parameters(size, self.encoder_units) for size in encoder_inputs)
        prediction = (self.symbols * self.prediction_embedding
                      + sum(_lstm_parameters(size, self.prediction_units) for size in prediction_inputs))
        joint = ((self.encoder_units + 1) * self.joint_units + (self.prediction_units + 1) * self.joint_units
                 + (self.joint_units + 1) * self.symbols)
        return encoder + prediction + joint


def _lstm_parameters(inputs: int, units: int) -> int:
    return 4 * units * (inputs + units + 1)


@overload
def stacked_frames(frames: int, width: int, stride: int) -> int: ...


@overload
def stacked_frames(frames: np.ndarray, width: int, stride: int) -> np.ndarray: ...


def stacked_frames(frames: int | np.ndarray, width: int, stride: int) -> int | np.ndarray:
    """Whole windows of ``width`` frames, ``stride`` apart, that fit in ``frames``:
    ``floor((frames - width) / stride) + 1``, 0 when fewer than ``width`` frames."""
    if isinstance(frames, np.ndarray):
        windows = (frames.astype(np.int64) - width) // stride + 1
        return np.maximum(windows, 0).astype(np.int32)
    return 0 if frames < width else (frames - width) // stride + 1
