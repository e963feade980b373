"""The TensorFlow backend's RNN-T family: what ``TensorFlowBackend`` does differently for ``family: rnnt``.

``TensorFlowBackend`` keeps everything that does not depend on the family (devices, threads,
the seed, tf.distribute and its replica step, the optimizer and its schedule, gradient
clipping, checkpoints, the profiler) and asks this module for what does: the model, the
arrays a training step feeds it, the utterances' losses, what ``predict()`` returns and the
neutral weight layout. The transducer has no BatchNorm, so a replica's step shares nothing with
the other replicas but the gradient all-reduce and, int8-emulated, each range's batch max (a MAX
all-reduce, ``benchbase_tf_ds2.rnnt.quantization``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from benchbase.backend import Batch, BuildContext, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.rnnt.quantization import input_range_names
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names, validate_weights
from benchbase_tf_ds2.model import SequenceLSTM
from benchbase_tf_ds2.rnnt.loss import lattice_losses
from benchbase_tf_ds2.rnnt.model import RNNTransducer

__all__ = ["TRANSDUCER_PRECISIONS", "build_model", "encoder_outputs", "export_weights", "import_weights",
           "training_arrays", "utterance_losses"]

TRANSDUCER_PRECISIONS = frozenset({"fp32", "tf32", "int8-emulated"})
"""What the TensorFlow backend implements for rnnt: IEEE float32, TF32 matmuls on GPUs (the same
code, with the flag the backend sets) and int8-emulated (``benchbase_tf_ds2.rnnt.quantization``).
Mixed precision is DS2's only."""


def build_model(context: BuildContext, fused_lstm: bool | None = None) -> RNNTransducer:
    """The transducer of ``context.model``, every variable created (from Keras's seeded generator).

    ``fused_lstm``: TensorFlow's fused BlockLSTMV2 kernel on a CPU (True), or Keras's LSTM (False,
    and None: the faster at the family's widths, ``benchbase_tf_ds2.rnnt.model``).
    """
    spec, precision = context.model, context.model.precision
    if not isinstance(spec, RNNTModelSpec):
        raise TypeError(f"an rnnt model needs an RNNTModelSpec, not {type(spec).__name__}")
    if precision not in TRANSDUCER_PRECISIONS:
        raise BenchbaseError(f"the tf backend trains rnnt in {' or '.join(sorted(TRANSDUCER_PRECISIONS))} only, "
                             f"not {precision}")
    model = RNNTransducer(spec, context.feature_dimension, fused_lstm=bool(fused_lstm))
    model.build_weights()
    return model


def training_arrays(spec: RNNTModelSpec, batch: Batch) -> tuple[np.ndarray, ...]:
    """(features, output lengths, labels, label lengths) as the compiled step takes them, as they
    are: the graph pads a degenerate batch itself (``RNNTransducer.lattice_of``)."""
    return batch.features, batch.output_lengths, batch.labels, batch.label_lengths


def utterance_losses(model: RNNTransducer, features: tf.Tensor, output_lengths: tf.Tensor, labels: tf.Tensor,
                     label_lengths: tf.Tensor) -> tf.Tensor:
    """Each utterance's transducer loss (batch,), float32, 0 for one without an encoder frame; the
    training pass (dropout on). The caller sums and divides by the global batch (``loss_reduction``)."""
    blank, emit = model.lattice_of(features, labels, output_lengths, label_lengths, training=True)
    return lattice_losses(blank, emit, output_lengths, label_lengths)


def encoder_outputs(encode: Callable[[np.ndarray], tf.Tensor], spec: RNNTModelSpec, inputs: Inputs) -> np.ndarray:
    """What ``predict()`` returns: the joint's encoder projection (batch, T', joint_units), float32.

    ``encode`` is the backend's compiled inference encoder; a batch too short for one encoder
    frame never reaches it (its projection has no frame to hold).
    """
    features = inputs.features
    if spec.output_frames(features.shape[1]) == 0:
        return np.zeros((features.shape[0], 0, spec.joint_units), dtype=np.float32)
    return np.asarray(encode(features).numpy(), dtype=np.float32)


def export_weights(model: RNNTransducer) -> dict[str, np.ndarray]:
    """Every weight of the layout, float32 numpy copies (Keras's orientation is the layout's)."""
    return {name: np.array(variable.numpy(), dtype=np.float32) for name, variable in neutral_variables(model).items()}


def import_weights(model: RNNTransducer, weights: Mapping[str, np.ndarray], feature_dimension: int) -> None:
    validate_weights(weights, model.spec, feature_dimension)
    for name, variable in neutral_variables(model).items():
        variable.assign(np.asarray(weights[name], dtype=np.float32))


def neutral_variables(model: RNNTransducer) -> dict[str, tf.Variable]:
    """Each neutral name (``benchbase.families.rnnt.weight_layout``) -> the Keras variable that holds it."""
    variables: dict[str, tf.Variable] = {}
    for prefix, lstm in zip(encoder_layer_names(model.spec), model.encoder):
        variables |= _lstm_variables(prefix, lstm)
    variables["prediction.embedding"] = model.embedding.embeddings
    for prefix, lstm in zip(prediction_layer_names(model.spec), model.prediction):
        variables |= _lstm_variables(prefix, lstm)
    for name, dense in (("encoder", model.joint_encoder), ("prediction", model.joint_prediction),
                        ("output", model.joint_output)):
        variables[f"joint.{name}.kernel"] = dense.kernel
        variables[f"joint.{name}.bias"] = dense.bias
    # int8-emulated's activation ranges, in the layout's order (none for any other precision).
    if model.int8 is not None:
        variables |= {name: model.int8.ranges[name.removesuffix(".input_range")]
                      for name in input_range_names(model.spec)}
    return variables


def _lstm_variables(prefix: str, lstm: SequenceLSTM) -> dict[str, tf.Variable]:
    cell = lstm.cell
    return {f"{prefix}.input_kernel": cell.kernel, f"{prefix}.recurrent_kernel": cell.recurrent_kernel,
            f"{prefix}.bias": cell.bias}
