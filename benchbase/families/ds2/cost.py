"""What one utterance costs Deep Speech 2: forward FLOPs by layer.

Counted analytically from ``DS2ModelSpec`` (a multiply-add is 2 FLOPs; an LSTM step's gate
nonlinearities and state updates are ``LSTM_ELEMENTWISE_PER_UNIT`` per unit). Every layer runs
once per output frame, the strided convolution's: the convolution reads ``conv_width`` frames of
features for each of its channels, each LSTM layer multiplies its input and its previous output
by the four gates' kernels, and the dense layer maps the last LSTM's units to the symbols. So an
utterance costs its output frames times one frame's count, whatever its length otherwise.

Left out, as small beside the matmuls (under 0.1% of ds2's count): BatchNorm, the clipped ReLU,
dropout, the dense layer's bias and the log-softmax. The matmul part of ``forward_flops`` is what
benchbase's NumPy reference multiplies (tests/test_ds2_cost.py).
"""

from __future__ import annotations

from benchbase.families.ds2.spec import DS2ModelSpec

__all__ = ["LSTM_ELEMENTWISE_PER_UNIT", "TRAINING_FACTOR", "forward_flops", "forward_flops_per_frame",
           "total_forward_flops", "training_flops"]

LSTM_ELEMENTWISE_PER_UNIT = 13
"""Gate bias (4), three sigmoids and two tanh (5, one FLOP each), c = f*c + i*g (3), h = o*tanh(c) (1)."""
TRAINING_FACTOR = 3
"""Forward + backward, the backward pass counted as twice the forward."""


def forward_flops_per_frame(model: DS2ModelSpec, feature_dimension: int) -> dict[str, int]:
    """Forward FLOPs of one output frame of one utterance, by layer.

    Keys: ``conv`` (a matmul: no bias, BatchNorm follows), ``lstm`` (every LSTM layer, the
    elementwise work included) and its matmul share ``lstm_matmul``, ``output`` (the dense
    layer's matmul).
    """
    units = model.lstm_units
    inputs = [model.conv_channels] + [units] * (model.lstm_layers - 1)
    lstm_matmul = sum(2 * 4 * units * (size + units) for size in inputs)
    return {
        "conv": 2 * model.conv_width * feature_dimension * model.conv_channels,
        "lstm": lstm_matmul + LSTM_ELEMENTWISE_PER_UNIT * units * model.lstm_layers,
        "lstm_matmul": lstm_matmul,
        "output": 2 * units * model.symbols,
    }


def forward_flops(model: DS2ModelSpec, feature_dimension: int, feature_frames: int) -> dict[str, int]:
    """Forward FLOPs of one utterance of ``feature_frames`` frames, by layer (``forward_flops_per_frame``'s keys)."""
    frames = model.output_frames(feature_frames)
    return {part: frames * value for part, value in forward_flops_per_frame(model, feature_dimension).items()}


def total_forward_flops(parts: dict[str, int]) -> int:
    """The sum of the parts (``lstm_matmul`` is inside ``lstm`` already)."""
    return sum(value for name, value in parts.items() if not name.endswith("_matmul"))


def training_flops(model: DS2ModelSpec, feature_dimension: int, feature_frames: int, labels: int = 0) -> int:
    """Training FLOPs of one utterance: ``TRAINING_FACTOR`` x its forward count (CTC's cost does not
    depend on ``labels``)."""
    return TRAINING_FACTOR * total_forward_flops(forward_flops(model, feature_dimension, feature_frames))
