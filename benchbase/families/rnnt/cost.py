"""What one utterance costs an RNN transducer: forward FLOPs by part, and the joint's memory.

Counted analytically from ``RNNTModelSpec`` (a multiply-add is 2 FLOPs; an LSTM step's gate
nonlinearities and state updates are ``LSTM_ELEMENTWISE_PER_UNIT`` per unit). For T feature
frames and U labels: the encoder runs over the stacked frames, the prediction network over U + 1
positions, and the joint over every cell of the (T', U + 1) lattice, which is where a
transducer differs from CTC: its output layer runs T' x (U + 1) times instead of T' times, and
its activations are the training step's largest tensors (``joint_bytes``).

The matmul part of ``forward_flops`` is what PyTorch's FlopCounterMode counts on the torch
backend's full lattice (tests/test_rnnt_cost.py); the elementwise parts are the model's own
count, not measured.
"""

from __future__ import annotations

from benchbase.families.rnnt.spec import RNNTModelSpec, stacked_frames

__all__ = ["LSTM_ELEMENTWISE_PER_UNIT", "TRAINING_FACTOR", "forward_flops", "joint_bytes", "lattice_frames",
           "total_forward_flops", "training_flops"]

LSTM_ELEMENTWISE_PER_UNIT = 13
"""Gate bias (4), three sigmoids and two tanh (5, one FLOP each), c = f*c + i*g (3), h = o*tanh(c) (1)."""
JOINT_ELEMENTWISE_PER_UNIT = 2
"""f(t) + g(u), then the activation."""
LOG_SOFTMAX_PER_SYMBOL = 4
"""The maximum's comparison, the subtraction, exp and the sum; the log is once per cell."""
TRAINING_FACTOR = 3
"""Forward + backward, the backward pass counted as twice the forward."""


def lattice_frames(model: RNNTModelSpec, feature_frames: int) -> tuple[int, int]:
    """(frames after input stacking, encoder frames T' after time stacking) for ``feature_frames``."""
    stacked = stacked_frames(feature_frames, model.input_stack, model.input_subsample)
    return stacked, model.output_frames(feature_frames)


def forward_flops(model: RNNTModelSpec, feature_dimension: int, feature_frames: int, labels: int) -> dict[str, int]:
    """Forward FLOPs of one utterance of ``feature_frames`` frames and ``labels`` labels, by part.

    Keys: ``encoder`` (its LSTMs), ``prediction`` (its LSTMs; the embedding is a lookup),
    ``joint_projections`` (f = joint.encoder over T', joint.prediction over U + 1),
    ``joint_output`` (the output matmul over every lattice cell), ``joint_elementwise`` (the
    addition and activation per cell and unit, the log-softmax per cell and symbol). Every
    ``*_matmul`` entry is the matmul share of the part before it.
    """
    stacked, frames = lattice_frames(model, feature_frames)
    positions, cells = labels + 1, frames * (labels + 1)
    units, joint = model.encoder_units, model.joint_units
    encoder_inputs = ([model.encoder_input_dimension(feature_dimension)] + [units] * (model.encoder_pre_layers - 1)
                      + [model.stack_time_factor * units] + [units] * (model.encoder_post_layers - 1))
    encoder_steps = [stacked] * model.encoder_pre_layers + [frames] * model.encoder_post_layers
    encoder_matmul = sum(steps * 2 * 4 * units * (size + units) for size, steps in zip(encoder_inputs, encoder_steps))
    prediction_inputs = [model.prediction_embedding] + [model.prediction_units] * (model.prediction_layers - 1)
    prediction_matmul = sum(positions * 2 * 4 * model.prediction_units * (size + model.prediction_units)
                            for size in prediction_inputs)
    return {
        "encoder": encoder_matmul + LSTM_ELEMENTWISE_PER_UNIT * units * sum(encoder_steps),
        "encoder_matmul": encoder_matmul,
        "prediction": prediction_matmul
        + LSTM_ELEMENTWISE_PER_UNIT * model.prediction_units * positions * model.prediction_layers,
        "prediction_matmul": prediction_matmul,
        "joint_projections": 2 * joint * (units * frames + model.prediction_units * positions),
        "joint_output": 2 * joint * model.symbols * cells,
        "joint_elementwise": cells * (JOINT_ELEMENTWISE_PER_UNIT * joint + LOG_SOFTMAX_PER_SYMBOL * model.symbols + 1),
    }


def total_forward_flops(parts: dict[str, int]) -> int:
    """The sum of ``forward_flops``' parts (its ``*_matmul`` shares are inside them already)."""
    return sum(value for name, value in parts.items() if not name.endswith("_matmul"))


def training_flops(model: RNNTModelSpec, feature_dimension: int, feature_frames: int, labels: int) -> int:
    """Training FLOPs of one utterance: ``TRAINING_FACTOR`` x its forward count, the joint's over its
    own (T', U + 1) lattice."""
    return TRAINING_FACTOR * total_forward_flops(forward_flops(model, feature_dimension, feature_frames, labels))

def joint_bytes(model: RNNTModelSpec, batch: int, frames: int, labels: int, bytes_per_value: int = 4) -> dict[str, int]:
    """The joint's two largest tensors over a padded batch of ``frames`` encoder frames (T') and
    ``labels`` labels: the hidden activation (batch, T', U + 1, joint_units) and the
    log-probabilities (batch, T', U + 1, symbols), each kept for the backward pass."""
    cells = batch * frames * (labels + 1)
    return {"hidden": cells * model.joint_units * bytes_per_value,
            "log_probs": cells * model.symbols * bytes_per_value}
