"""The RNN transducer of ``RNNTModelSpec``, in PyTorch (``benchbase.families.rnnt.reference``'s architecture).

    features -> input stacking -> [LSTM] x pre -> time stacking -> [LSTM] x post -> joint.encoder   f
    blank, labels -> embedding -> [LSTM] x prediction_layers                                          g
    joint: log_softmax(output(activation(f(t) + joint.prediction(g(u)))))

Inputs are right-padded and every LSTM is unidirectional, so an utterance's valid frames never
see its padding: no packing is needed. Each LSTM is its own ``nn.LSTM`` (oneDNN's or cuDNN's
kernel), so that dropout falls between consecutive layers (the time stacking included) and the
neutral layout's names map one to one onto modules. PyTorch's second LSTM bias (``bias_hh``)
is zeroed and frozen, as in the DS2 model: the layout's single bias per gate is ``bias_ih``.

Dropout (``spec.dropout``, training only) is applied to the input of every LSTM layer but the
first of each network (so between consecutive layers, the encoder's time stacking included, and
not before the joint's projections) and to the joint's hidden layer after its activation.

int8-emulated (``benchbase.families.rnnt.quantization``): every LSTM runs the DS2 model's
quantized recurrence (``quantized_lstm``: fused kernels cannot quantize h(t-1) inside their loop) on
its fake-quantized input and kernels, and the joint's three projections fake-quantize their
inputs and kernels; each quantized input's moving-average range is an ``input_range`` buffer
of its module, as in the DS2 model. joint.output's range in training is that of the lattice
cells within the lengths, which is what ``lattice`` packs: its maximum is the spec's as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from benchbase.families.rnnt.quantization import input_range_names
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names
from benchbase.numerics.quantization import is_quantized
from benchbase_torch_ds2.mixed_lstm import lstm_outputs
from benchbase_torch_ds2.quantization import FakeQuantizer, quantized_lstm
from benchbase_torch_ds2.rnnt.graphed_loss import LossGraphs

__all__ = ["RNNTransducer", "stack_frames"]


class RNNTransducer(nn.Module):
    """The encoder, the prediction network and the joint; ``forward`` is the training lattice."""

    def __init__(self, spec: RNNTModelSpec, feature_dimension: int, distributed: bool = False) -> None:
        """``distributed``: one of several learners that keep one model (int8-emulated's ranges are
        then the global batch's, a MAX all-reduce per range)."""
        super().__init__()
        self.spec = spec
        units = spec.encoder_units
        encoder_inputs = ([spec.encoder_input_dimension(feature_dimension)] + [units] * (spec.encoder_pre_layers - 1)
                          + [spec.stack_time_factor * units] + [units] * (spec.encoder_post_layers - 1))
        self.encoder = nn.ModuleList(nn.LSTM(size, units, batch_first=True) for size in encoder_inputs)
        self.embedding = nn.Embedding(spec.symbols, spec.prediction_embedding)
        prediction_inputs = [spec.prediction_embedding] + [spec.prediction_units] * (spec.prediction_layers - 1)
        self.prediction = nn.ModuleList(nn.LSTM(size, spec.prediction_units, batch_first=True)
                                        for size in prediction_inputs)
        self.joint_encoder = nn.Linear(units, spec.joint_units)
        self.joint_prediction = nn.Linear(spec.prediction_units, spec.joint_units)
        self.joint_output = nn.Linear(spec.joint_units, spec.symbols)
        self.dropout = nn.Dropout(spec.dropout)
        self.quantizer = FakeQuantizer(spec.quantization, global_max=distributed) if is_quantized(spec) else None
        self.loss_graphs: LossGraphs | None = None
        """Training's transducer loss from CUDA graphs (the family sets it where the profile allows them)."""
        if self.quantizer is not None:  # 0 until the first training step sets them
            for layer in self.range_layers().values():
                layer.register_buffer("input_range", torch.zeros(()))
        self.reset_parameters()

    def cuda_graph_sets(self) -> list[LossGraphs]:
        """The CUDA graphs this network replays of its own (the backend reports their captures)."""
        return [self.loss_graphs] if self.loss_graphs is not None else []

    def range_layers(self) -> dict[str, nn.Module]:
        """Each layer of the neutral layout whose input may be quantized -> its module."""
        return ({f"encoder.lstm.{i}": lstm for i, lstm in enumerate(self.encoder)}
                | {f"prediction.lstm.{i}": lstm for i, lstm in enumerate(self.prediction)}
                | {"joint.encoder": self.joint_encoder, "joint.prediction": self.joint_prediction,
                   "joint.output": self.joint_output})

    def reset_parameters(self) -> None:
        """The spec's init: Xavier-uniform matrices (fan-in and fan-out of the whole matrix, the
        same in PyTorch's (outputs, inputs) as in the layout's (inputs, outputs)), zero biases but
        each LSTM's forget gate."""
        for lstm in (*self.encoder, *self.prediction):
            _initialize_lstm(lstm, self.spec.lstm_forget_bias)
        nn.init.xavier_uniform_(self.embedding.weight)
        for linear in (self.joint_encoder, self.joint_prediction, self.joint_output):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """(batch, frames, features) -> the joint's encoder projection f, (batch, T', joint_units),
        T' = ``spec.output_frames(frames)`` of the padded batch: what ``predict()`` returns."""
        spec = self.spec
        if spec.output_frames(features.shape[1]) == 0:  # too short for one encoder frame: nothing to run
            return features.new_zeros((features.shape[0], 0, spec.joint_units))
        x = stack_frames(features, spec.input_stack, spec.input_subsample)
        for layer, lstm in enumerate(self.encoder):
            if layer == spec.encoder_pre_layers:
                x = stack_frames(x, spec.stack_time_factor, spec.stack_time_factor)
            if layer > 0:
                x = self.dropout(x)
            x = self._lstm("encoder.lstm", lstm, x)
        return self._dense("joint.encoder", self.joint_encoder, x)

    def predict_net(self, labels: torch.Tensor, label_lengths: torch.Tensor) -> torch.Tensor:
        """(batch, U) labels -> g, (batch, U + 1, prediction_units): the start symbol (the blank)
        first; labels at or past ``label_lengths`` are read as the blank."""
        blank = self.spec.blank_index
        positions = torch.arange(labels.shape[1], device=labels.device)
        padded = torch.where(positions < label_lengths[:, None], labels.long(), blank)
        x = self.embedding(nn.functional.pad(padded, (1, 0), value=blank))
        for layer, lstm in enumerate(self.prediction):
            if layer > 0:
                x = self.dropout(x)
            x = self._lstm("prediction.lstm", lstm, x)
        return x

    def joint(self, encoded: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
        """f (batch, T', joint_units) and g (batch, U + 1, prediction_units) -> log-probabilities
        (batch, T', U + 1, symbols), float32, log-softmax over the symbols: every cell of the padded
        lattice (training computes only the cells within the lengths, ``lattice``)."""
        return self._joint_output(encoded[:, :, None, :] + self._dense("joint.prediction", self.joint_prediction,
                                                                      predicted)[:, None, :, :])

    def lattice(self, encoded: torch.Tensor, predicted: torch.Tensor, labels: torch.Tensor,
                output_lengths: torch.Tensor, label_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the transducer loss reads of the joint: (log P(blank | t, u), log P(y_{u+1} | t, u)),
        each (batch, T', U + 1), float32, -inf outside each utterance's lengths and for the emission
        at u = U (``loss.transducer_lattice`` of ``joint``, within the lengths).

        The joint runs on the cells within the lengths only, packed: its (cells, joint_units)
        hidden layer is the step's largest tensor, and a batch of random lengths pads its lattice
        to two or three times the cells it holds (37 % of the padded cells are inside on the test
        store's batches of 32).
        """
        batch, frames, width = encoded.shape
        positions = predicted.shape[1]
        inside = ((torch.arange(frames, device=encoded.device) < output_lengths[:, None])[:, :, None]
                  & (torch.arange(positions, device=encoded.device) <= label_lengths[:, None])[:, None, :])
        rows, t, u = inside.nonzero(as_tuple=True)
        projected = self._dense("joint.prediction", self.joint_prediction, predicted).reshape(-1, width)
        hidden = (encoded.reshape(-1, width).index_select(0, rows * frames + t)
                  + projected.index_select(0, rows * positions + u))
        log_probs = self._joint_output(hidden)  # (cells, symbols)
        blank = self.spec.blank_index
        next_label = torch.where(u < label_lengths[rows], labels[rows, u.clamp(max=labels.shape[1] - 1)], blank)
        emit = torch.gather(log_probs, 1, next_label[:, None])[:, 0]
        emit = emit.masked_fill(u == label_lengths[rows], float("-inf"))  # no label left to emit
        empty = log_probs.new_full((batch, frames, positions), float("-inf"))
        return empty.index_put((rows, t, u), log_probs[:, blank]), empty.index_put((rows, t, u), emit)

    def forward(self, features: torch.Tensor, labels: torch.Tensor, output_lengths: torch.Tensor,
                label_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The training pass in one call (so that DistributedDataParallel sees every parameter used):
        ``lattice`` of the batch, ``labels`` (batch, U) right-padded, lengths (batch,) int64."""
        encoded = self.encode(features)
        return self.lattice(encoded, self.predict_net(labels, label_lengths), labels, output_lengths, label_lengths)

    def _joint_output(self, hidden: torch.Tensor) -> torch.Tensor:
        """activation -> dropout -> joint.output -> log-softmax (in float32) over the last axis."""
        hidden = torch.relu(hidden) if self.spec.joint_activation == "relu" else torch.tanh(hidden)
        return torch.log_softmax(self._dense("joint.output", self.joint_output, self._joint_dropout(hidden)).float(),
                                 dim=-1)

    def _lstm(self, network: str, lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
        """One LSTM layer of ``network`` ("encoder.lstm", "prediction.lstm"): the fused kernel (in
        bfloat16 under a bf16 autocast), or int8-emulated's quantized loop."""
        quantize = self.quantizer
        if quantize is None:
            return lstm_outputs(lstm, x)
        return quantized_lstm(quantize.activation(f"{network}.input", lstm, x),
                              quantize.weight(f"{network}.input_kernel", lstm.weight_ih_l0),
                              quantize.weight(f"{network}.recurrent_kernel", lstm.weight_hh_l0),
                              lstm.bias_ih_l0 + lstm.bias_hh_l0, quantize.state_quantizer(f"{network}.recurrent_state"))

    def _dense(self, name: str, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """One of the joint's projections ("joint.encoder", ...), fake-quantized when int8-emulated."""
        quantize = self.quantizer
        if quantize is None:
            return linear(x)
        return nn.functional.linear(quantize.activation(f"{name}.input", linear, x),
                                    quantize.weight(f"{name}.kernel", linear.weight), linear.bias)

    def _joint_dropout(self, hidden: torch.Tensor) -> torch.Tensor:
        """Inverted dropout of the joint's hidden layer, the same as ``self.dropout``'s.

        On a CPU the mask is drawn as uniform floats compared with the keep rate: PyTorch's
        dropout draws it with bernoulli_, which runs on one thread, and on the step's largest
        tensor that took a quarter of a small model's step (0.15 s of 0.43 on 2 cores).
        """
        rate = self.spec.dropout
        if not self.training or rate == 0.0 or hidden.device.type != "cpu":
            return self.dropout(hidden)
        keep = 1.0 - rate
        mask = (torch.rand(hidden.shape, dtype=hidden.dtype) < keep).to(hidden.dtype).mul_(1.0 / keep)
        return hidden * mask


def stack_frames(x: torch.Tensor, width: int, stride: int) -> torch.Tensor:
    """(batch, frames, features) -> (batch, windows, width * features): whole windows of ``width``
    frames, ``stride`` apart, each window's frames side by side in time order (the reference's
    ``stack_frames``)."""
    batch, frames, features = x.shape
    if frames < width:
        return x.new_zeros((batch, 0, width * features))
    windows = x.unfold(1, width, stride)  # (batch, windows, features, width)
    return windows.transpose(2, 3).reshape(batch, windows.shape[1], width * features)


def _initialize_lstm(lstm: nn.LSTM, forget_bias: float) -> None:
    units = lstm.hidden_size
    nn.init.xavier_uniform_(lstm.weight_ih_l0)
    nn.init.xavier_uniform_(lstm.weight_hh_l0)
    nn.init.zeros_(lstm.bias_ih_l0)
    with torch.no_grad():
        lstm.bias_ih_l0[units : 2 * units] = forget_bias  # gate order i, f, g, o (PyTorch's and the layout's)
    nn.init.zeros_(lstm.bias_hh_l0)
    lstm.bias_hh_l0.requires_grad_(False)


# --- the framework-neutral layout (benchbase.families.rnnt.weight_layout) -------------------------


def export_weights(model: RNNTransducer) -> dict[str, np.ndarray]:
    """Every weight of the layout, float32 numpy copies."""
    return {name: tensor.detach().cpu().numpy().astype(np.float32, copy=True)
            for name, tensor in _neutral_view(model).items()}


def import_weights(model: RNNTransducer, weights: Mapping[str, np.ndarray]) -> None:
    """Set every parameter from the layout (names and shapes already validated); bias_hh stays zero."""
    with torch.no_grad():
        for name, (tensor, transposed) in _torch_targets(model).items():
            value = torch.as_tensor(np.asarray(weights[name], dtype=np.float32))
            tensor.copy_(value.t() if transposed else value)
        for lstm in (*model.encoder, *model.prediction):
            lstm.bias_hh_l0.zero_()


def _neutral_view(model: RNNTransducer) -> dict[str, torch.Tensor]:
    """Each neutral name -> the tensor in the layout's orientation ((inputs, outputs) kernels)."""
    return {name: tensor.t() if transposed else tensor for name, (tensor, transposed) in _torch_targets(model).items()}


def _torch_targets(model: RNNTransducer) -> dict[str, tuple[torch.Tensor, bool]]:
    """Each neutral name -> (the PyTorch parameter, whether the layout holds it transposed)."""
    targets: dict[str, tuple[torch.Tensor, bool]] = {}
    for prefix, lstm in zip(encoder_layer_names(model.spec), model.encoder):
        targets |= _lstm_targets(prefix, lstm)
    targets["prediction.embedding"] = (model.embedding.weight, False)
    for prefix, lstm in zip(prediction_layer_names(model.spec), model.prediction):
        targets |= _lstm_targets(prefix, lstm)
    for name, linear in (("encoder", model.joint_encoder), ("prediction", model.joint_prediction),
                         ("output", model.joint_output)):
        targets[f"joint.{name}.kernel"] = (linear.weight, True)
        targets[f"joint.{name}.bias"] = (linear.bias, False)
    layers = model.range_layers()  # int8-emulated's activation ranges, scalars
    return targets | {name: (layers[name.removesuffix(".input_range")].input_range, False)
                      for name in input_range_names(model.spec)}


def _lstm_targets(prefix: str, lstm: nn.LSTM) -> dict[str, tuple[torch.Tensor, bool]]:
    # bias_hh is zero and frozen, so bias_ih alone is the layout's bias (import zeroes bias_hh again).
    return {f"{prefix}.input_kernel": (lstm.weight_ih_l0, True),
            f"{prefix}.recurrent_kernel": (lstm.weight_hh_l0, True),
            f"{prefix}.bias": (lstm.bias_ih_l0, False)}
