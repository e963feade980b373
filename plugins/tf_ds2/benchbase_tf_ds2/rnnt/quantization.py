"""int8-emulated for the TensorFlow transducer (``benchbase.families.rnnt.quantization`` is the spec).

The fake quantizers are the ones the DS2 model uses too (``benchbase_tf_ds2.quantization``: the
same float32 operations as the NumPy reference, round half to even, straight-through gradients)
and so is the handling of each moving-average range: a non-trainable float32 variable of the model
(checkpointed with its variables, in the neutral layout as ``<layer>.input_range``), updated
first with the batch's max|x| and then used, that max all-reduced (MAX) across replicas so that
every replica keeps the global batch's range.

Two things differ from DS2. A range may count fewer elements than the layer quantizes:
joint.output's counts the lattice cells within the lengths, which the training pass's packed
joint computes alone anyway, and every range leaves out the padding that the backend adds itself
to a degenerate batch (``RNNTransducer.lattice_of``), as ``QuantizationSpec`` excludes it. And a
range that counts no element at all keeps its value, as the reference's does.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from benchbase.families.rnnt.quantization import input_range_names, tensor_name
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase_tf_ds2.cross_replica import cross_replica_max
from benchbase_tf_ds2.quantization import quantize_activation, quantize_weight, quantized_lstm, updated_range

__all__ = ["TransducerQuantizer"]

_NOTHING_COUNTED = -1.0
"""A replica's batch max when its part of the batch has no element in the range: below every
real max|x| (>= 0), so the MAX across replicas ignores it, and only where every replica has it
does the range stay as it was."""


class TransducerQuantizer:
    """Fake quantization at every point ``spec.quantization`` names, over the model's layers.

    Layers go by their names in the neutral layout ("encoder.lstm.0", "joint.output").
    """

    def __init__(self, model: keras.Model, spec: RNNTModelSpec) -> None:
        self.spec = spec.quantization
        # Model state like the DS2 model's ranges: 0 until the first training step sets them.
        self.ranges = {
            name.removesuffix(".input_range"): model.add_weight(
                shape=(), initializer="zeros", trainable=False, autocast=False, name=name.replace(".", "_"))
            for name in input_range_names(spec)
        }

    def quantizes(self, tensor: str) -> bool:
        return self.spec.quantizes(tensor_name(tensor))

    def input(self, layer: str, x: tf.Tensor, training: bool, extent: tf.Tensor | None = None) -> tf.Tensor:
        """``layer``'s input as the layer computes with it. ``extent``: in training, the range
        counts only ``x[:, :extent]`` (the positions the batch really has); every element is
        quantized either way."""
        variable = self.ranges.get(layer)
        if variable is None:  # the spec leaves this input unquantized
            return x
        stored = tf.convert_to_tensor(variable)
        if training:
            counted = tf.stop_gradient(x if extent is None else x[:, :extent])
            batch_max = tf.where(tf.size(counted) > 0, tf.reduce_max(tf.abs(counted)),
                                 tf.constant(_NOTHING_COUNTED, x.dtype))
            # The global batch's max|x|: every replica then stores the same range, the one a
            # single device training on the whole batch would.
            batch_max = cross_replica_max(batch_max)
            used = tf.where(batch_max < 0, stored, updated_range(self.spec, stored, batch_max))
            variable.assign(used)
        else:
            used = tf.where(stored > 0, stored, tf.reduce_max(tf.abs(tf.stop_gradient(x))))
        return quantize_activation(self.spec, x, used)

    def kernel(self, name: str, variable: tf.Variable) -> tf.Tensor:
        if not self.quantizes(name):
            return tf.convert_to_tensor(variable)
        return quantize_weight(self.spec, variable)

    def lstm(self, layer: str, lstm: keras.layers.LSTM, x: tf.Tensor, training: bool,
             extent: tf.Tensor | None = None) -> tf.Tensor:
        """The LSTM ``layer`` over (batch, steps, inputs): the DS2 model's frame-by-frame loop, which
        quantizes h(t-1) before each recurrent matmul (no fused kernel can), on the layer's own
        weights."""
        cell = lstm.cell
        state = self.spec if self.quantizes(f"{layer}.recurrent_state") else None
        return quantized_lstm(self.input(layer, x, training, extent), self.kernel(f"{layer}.input_kernel", cell.kernel),
                              self.kernel(f"{layer}.recurrent_kernel", cell.recurrent_kernel),
                              tf.convert_to_tensor(cell.bias), state)

    def dense(self, layer: str, dense: keras.layers.Dense, x: tf.Tensor, training: bool,
              extent: tf.Tensor | None = None) -> tf.Tensor:
        """One of the joint's projections ("joint.encoder", ...) on the last axis of ``x``."""
        kernel = self.kernel(f"{layer}.kernel", dense.kernel)
        return tf.tensordot(self.input(layer, x, training, extent), kernel, axes=1) + tf.convert_to_tensor(dense.bias)
