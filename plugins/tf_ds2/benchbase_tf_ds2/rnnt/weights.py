"""The transducer's Keras variables by their names in benchbase's framework-neutral layout.

The neutral layout is Keras's own (kernels (inputs, outputs), LSTM gates i, f, c, o, one bias per
gate), so no array is transposed here.
"""

from __future__ import annotations

import tensorflow as tf

from benchbase.families.rnnt.quantization import input_range_names
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names
from benchbase_tf_ds2.lstm import SequenceLSTM
from benchbase_tf_ds2.rnnt.model import RNNTransducer

__all__ = ["neutral_variables"]


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
