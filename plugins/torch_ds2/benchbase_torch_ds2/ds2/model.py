"""The Deep Speech 2-like model of the workload spec, in PyTorch.

conv (width 11, stride 2, valid) -> BatchNorm -> clipped ReLU -> dropout
  -> [LSTM -> BatchNorm -> dropout] x layers -> linear -> log-softmax

Inputs are right-padded, and the LSTMs are unidirectional, so the outputs at valid frames
never see padding: no packing is needed, and CTC and decoding ignore the padded frames.
"""

from __future__ import annotations

import torch
from torch import nn

from benchbase.numerics.quantization import is_quantized
from benchbase.specs import ModelSpec
from benchbase_torch_ds2.mixed_lstm import lstm_outputs
from benchbase_torch_ds2.quantization import FakeQuantizer, quantized_lstm

__all__ = ["DeepSpeech2", "SpecBatchNorm1d"]

CLIPPED_RELU_CEILING = 20.0


class SpecBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose running variance takes the batch's biased variance, as the spec pins.

    PyTorch folds the unbiased variance into its running estimate, Keras and Flax the biased
    one. Normalization itself runs in PyTorch's fused kernel (biased, over every frame of the
    padded batch); the running statistics are updated here, from the detached input.
    """

    def __init__(self, channels: int, spec: ModelSpec, synchronized: bool = False) -> None:
        super().__init__(channels, eps=spec.batchnorm_epsilon, momentum=None)
        self.keep = spec.batchnorm_momentum  # Keras convention: the share of the old estimate kept
        self.synchronized = synchronized

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        if self.synchronized:
            return self._global_batch_forward(x)
        with torch.no_grad():
            variance, mean = torch.var_mean(x.detach().float(), dim=_frame_dims(x), correction=0)
            self.running_mean.mul_(self.keep).add_(mean, alpha=1.0 - self.keep)
            self.running_var.mul_(self.keep).add_(variance, alpha=1.0 - self.keep)
        return nn.functional.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.eps)

    def _global_batch_forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training across processes: the statistics of every frame of the whole global batch.

        The slices are equal (same rows, same padded frames), so the global mean and biased
        variance come from all-reduced sums over one count. torch.distributed.nn's all_reduce is
        differentiable (its backward all-reduces the gradients), so every rank's loss reaches
        every rank's activations, as in one process. The sum and the sum of squares go in one
        all-reduce, forward and backward (each a point where the faster rank waits: on 2 CPU
        devices two of them per layer were a fifth of the step), summed in float64, where
        E[x^2] - E[x]^2 does not cancel as it would in float32. PyTorch's SyncBatchNorm runs on
        GPUs only; this runs on gloo too.
        """
        from torch.distributed.nn.functional import all_reduce

        values, dims = x.float(), _frame_dims(x)
        channel = (1, -1) + (1,) * (x.dim() - 2)  # broadcasts a per-channel vector over x
        count = values.numel() // values.shape[1] * torch.distributed.get_world_size()
        sums = all_reduce(torch.stack([values.sum(dim=dims, dtype=torch.float64),
                                       values.square().sum(dim=dims, dtype=torch.float64)])) / count
        mean, variance = sums[0].float(), (sums[1] - sums[0].square()).clamp_min(0.0).float()
        centered = values - mean.view(channel)
        with torch.no_grad():
            self.running_mean.mul_(self.keep).add_(mean.detach(), alpha=1.0 - self.keep)
            self.running_var.mul_(self.keep).add_(variance.detach(), alpha=1.0 - self.keep)
        normalized = centered * torch.rsqrt(variance + self.eps).view(channel)
        return (normalized * self.weight.view(channel) + self.bias.view(channel)).to(x.dtype)


def _frame_dims(x: torch.Tensor) -> tuple[int, ...]:
    """Every dimension but the channels' (1): (batch, channels) or (batch, channels, frames)."""
    return (0,) if x.dim() == 2 else (0, 2)


class DeepSpeech2(nn.Module):
    def __init__(self, spec: ModelSpec, feature_dimension: int, distributed: bool = False) -> None:
        """``distributed``: one of several processes training together (BatchNorm statistics and
        int8-emulated's activation ranges are then the global batch's)."""
        super().__init__()
        self.spec = spec
        self.conv = nn.Conv1d(feature_dimension, spec.conv_channels, spec.conv_width, stride=spec.conv_stride,
                              bias=False)
        self.conv_norm = SpecBatchNorm1d(spec.conv_channels, spec, synchronized=distributed)
        sizes = [spec.conv_channels] + [spec.lstm_units] * spec.lstm_layers
        self.lstms = nn.ModuleList(nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(spec.lstm_layers))
        self.lstm_norms = nn.ModuleList(SpecBatchNorm1d(spec.lstm_units, spec, synchronized=distributed)
                                        for _ in range(spec.lstm_layers))
        self.dropout = nn.Dropout(spec.dropout)
        self.output = nn.Linear(spec.lstm_units, spec.symbols)
        self.quantizer = FakeQuantizer(spec.quantization, global_max=distributed) if is_quantized(spec) else None
        if self.quantizer is not None:
            # int8-emulated's moving-average input ranges: buffers, so state_dict (the checkpoint)
            # holds them as it holds BatchNorm's statistics; 0 until the first training step.
            for layer in (self.conv, *self.lstms, self.output):
                layer.register_buffer("input_range", torch.zeros(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.conv.weight)
        for lstm in self.lstms:
            _initialize_lstm(lstm, self.spec.lstm_forget_bias)
        nn.init.xavier_uniform_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(batch, frames, features) -> log-probs (batch, output frames, symbols), float32.

        Under torch.autocast (bf16, fp16) the conv, LSTMs and output layer run in the autocast
        type; the log-softmax is taken in float32 whatever the precision.
        """
        if self.quantizer is not None:
            return self._quantized_forward(features)
        x = self.conv(features.transpose(1, 2))
        x = self.dropout(self._activation(self.conv_norm(x))).transpose(1, 2)
        for lstm, norm in zip(self.lstms, self.lstm_norms):
            x = self.dropout(_normalize_frames(norm, lstm_outputs(lstm, x)))
        return torch.log_softmax(self.output(x).float(), dim=-1)

    def _quantized_forward(self, features: torch.Tensor) -> torch.Tensor:
        """int8-emulated: the same layers on fake-quantized inputs and weights (ModelSpec.quantization)."""
        quantize = self.quantizer
        x = quantize.activation("conv.input", self.conv, features)
        x = nn.functional.conv1d(x.transpose(1, 2), quantize.weight("conv.kernel", self.conv.weight),
                                 stride=self.spec.conv_stride)
        x = self.dropout(self._activation(self.conv_norm(x))).transpose(1, 2)
        state = quantize.state_quantizer()
        for lstm, norm in zip(self.lstms, self.lstm_norms):
            x = quantize.activation("lstm.input", lstm, x)
            x = quantized_lstm(x, quantize.weight("lstm.input_kernel", lstm.weight_ih_l0),
                               quantize.weight("lstm.recurrent_kernel", lstm.weight_hh_l0),
                               lstm.bias_ih_l0 + lstm.bias_hh_l0, state)
            x = self.dropout(_normalize_frames(norm, x))
        x = quantize.activation("output.input", self.output, x)
        logits = nn.functional.linear(x, quantize.weight("output.kernel", self.output.weight), self.output.bias)
        return torch.log_softmax(logits, dim=-1)

    def _activation(self, x: torch.Tensor) -> torch.Tensor:
        if self.spec.conv_activation == "clipped_relu":
            return torch.clamp(x, 0.0, CLIPPED_RELU_CEILING)
        return torch.relu(x)


def _normalize_frames(norm: SpecBatchNorm1d, x: torch.Tensor) -> torch.Tensor:
    """BatchNorm of a (batch, frames, channels) LSTM output over its (batch x frames, channels)
    view, as it lies in memory: the same statistics as over a (batch, channels, frames)
    transposed view, without that view's copies and strided backward. On an H100 (ds2, batch
    150) a step took 0.96x (bf16) and 0.98x (fp32) the transposed form's, 0.89x under a CUDA
    graph (docs/BENCHMARKS.md)."""
    batch, frames, channels = x.shape
    return norm(x.reshape(batch * frames, channels)).reshape(batch, frames, channels)


def _initialize_lstm(lstm: nn.LSTM, forget_bias: float) -> None:
    """Xavier weights and one bias per gate, as the spec and Keras have it.

    PyTorch keeps two bias vectors per layer (input and hidden); the hidden one is zeroed and
    frozen so that both frameworks train exactly the parameters the spec implies.
    """
    units = lstm.hidden_size
    for name, parameter in lstm.named_parameters():
        if name.startswith("weight"):
            nn.init.xavier_uniform_(parameter)
        elif name.startswith("bias_ih"):
            nn.init.zeros_(parameter)
            with torch.no_grad():
                parameter[units : 2 * units] = forget_bias  # gate order i, f, g, o
        else:
            nn.init.zeros_(parameter)
            parameter.requires_grad_(False)
