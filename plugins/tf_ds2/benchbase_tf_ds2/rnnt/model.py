"""The RNN transducer of ``RNNTModelSpec`` in Keras 3 on TensorFlow (``benchbase.families.rnnt.reference``'s model).

    features -> input stacking -> [LSTM] x pre -> time stacking -> [LSTM] x post -> joint.encoder   f
    blank, labels -> embedding -> [LSTM] x prediction_layers                                          g
    joint: log_softmax(output(activation(f(t) + joint.prediction(g(u)))))

It mirrors ``benchbase_torch_ds2.rnnt.model`` layer for layer. Inputs are right-padded and every
LSTM is unidirectional, so an utterance's valid frames never see its padding: no mask is
passed. Each LSTM is ``benchbase_tf_ds2.lstm.SequenceLSTM``, whose weights are Keras's own and already
in the neutral layout (kernels (inputs, outputs), gates i, f, c, o, one bias per gate). Unlike
DS2 it runs as Keras's LSTM by default, on a CPU too (Keras's cuDNN path on a GPU): at
rnnt-mini's widths (279 inputs, 128 units) Keras's loop trained faster, a median step of 32
utterances of 0.65 to 0.85 s against the fused BlockLSTMV2 kernel's 0.80 to 1.28 s (one thread,
three interleaved runs of 22 steps each, on a loaded 2-core machine; the fused kernel wins at
DS2's 96 units). ``fused_lstm=True`` still selects it.

Dropout (``spec.dropout``, training only) is applied to the input of every LSTM layer but the
first of each network (so between consecutive layers, the encoder's time stacking included, and
not before the joint's projections) and to the joint's hidden layer after its activation. It is
``ReplicaDropout``: on several replicas each draws its own masks.

int8-emulated (``benchbase.families.rnnt.quantization``): ``TransducerQuantizer`` fake-quantizes
each LSTM's input and kernels and h(t-1) in the DS2 model's frame-by-frame loop (neither cuDNN
nor BlockLSTMV2 can quantize h(t-1) inside theirs), and the joint's three projections' inputs and
kernels. joint.output's range in training is that of the cells within the lengths, which is
what ``lattice`` packs: the maximum over its hidden layer is the spec's as it is.

bf16 and fp16 are Keras's mixed precision (``benchbase_tf_ds2.family.MIXED_POLICIES``): float32
variables, the LSTMs and the joint's projections in bfloat16 or float16, the joint's log-softmax,
and so the lattice and the loss, in float32.

Row gathers (the embedding, the packed joint's cells) go through ``gather_rows``, whose gradient
is a dense segment sum: TensorFlow's own gather gradient is a sparse ``IndexedSlices`` that the
optimizer and the gradient clip would densify anyway, with a warning per trace about its
unknown shape.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import encoder_layer_names, prediction_layer_names
from benchbase.numerics.quantization import is_quantized
from benchbase_tf_ds2.cross_replica import ReplicaDropout
from benchbase_tf_ds2.family import MIXED_POLICIES
from benchbase_tf_ds2.lstm import ForgetGateBias, SequenceLSTM
from benchbase_tf_ds2.rnnt.quantization import TransducerQuantizer

__all__ = ["RNNTransducer", "gather_rows", "stack_frames"]

_RowGradient = Callable[[tf.Tensor], tuple[tf.Tensor, None]]


class RNNTransducer(keras.Model):  # type: ignore[misc]
    """The encoder, the prediction network and the joint; ``lattice_of`` is the training pass."""

    def __init__(self, spec: RNNTModelSpec, feature_dimension: int, fused_lstm: bool) -> None:
        super().__init__(name="rnn_transducer")
        self.spec = spec
        self.feature_dimension = feature_dimension
        # A mixed precision's policy; otherwise Keras's global one (float32, or a test's float64).
        policy = MIXED_POLICIES.get(spec.precision)
        units = spec.encoder_units
        self.encoder_inputs = ([spec.encoder_input_dimension(feature_dimension)]
                               + [units] * (spec.encoder_pre_layers - 1)
                               + [spec.stack_time_factor * units] + [units] * (spec.encoder_post_layers - 1))
        self.encoder = [_lstm(units, spec, fused_lstm, f"encoder_lstm_{index}", policy)
                        for index in range(len(self.encoder_inputs))]
        # Xavier-uniform over the (symbols, embedding) table, as the layout holds it.
        self.embedding = keras.layers.Embedding(spec.symbols, spec.prediction_embedding,
                                                embeddings_initializer="glorot_uniform", name="embedding")
        self.prediction_inputs = [spec.prediction_embedding] + [spec.prediction_units] * (spec.prediction_layers - 1)
        self.prediction = [_lstm(spec.prediction_units, spec, fused_lstm, f"prediction_lstm_{index}", policy)
                           for index in range(spec.prediction_layers)]
        self.joint_encoder = _dense(spec.joint_units, "joint_encoder", policy)
        self.joint_prediction = _dense(spec.joint_units, "joint_prediction", policy)
        self.joint_output = _dense(spec.symbols, "joint_output", policy)
        self.dropout = ReplicaDropout(spec.dropout, name="dropout")
        # int8-emulated's fake quantization and its ranges (none for any other precision).
        self.int8 = TransducerQuantizer(self, spec) if is_quantized(spec) else None

    def build_weights(self) -> None:
        """Create every variable now, in a fixed order (Keras creates them lazily on the first call)."""
        spec = self.spec
        for lstm, inputs in zip(self.encoder, self.encoder_inputs):
            lstm.build((None, None, inputs))
        self.embedding.build((None, None))
        for lstm, inputs in zip(self.prediction, self.prediction_inputs):
            lstm.build((None, None, inputs))
        self.joint_encoder.build((None, spec.encoder_units))
        self.joint_prediction.build((None, spec.prediction_units))
        self.joint_output.build((None, spec.joint_units))
        self.built = True

    def call(self, features: tf.Tensor, training: bool = False) -> tf.Tensor:
        return self.encode(features, training=training)

    def encode(self, features: tf.Tensor, training: bool = False, own_frames: tf.Tensor | None = None) -> tf.Tensor:
        """(batch, frames, features) -> the joint's encoder projection f, (batch, T', joint_units),
        T' = ``spec.output_frames(frames)`` of the padded batch: what ``predict()`` returns.

        The batch must have at least one encoder frame: the backend handles shorter ones itself.
        ``own_frames``: how many of the frames are the batch's own (``lattice_of``), the rest the
        backend's padding, which no int8 range counts.
        """
        spec = self.spec
        x = stack_frames(features, spec.input_stack, spec.input_subsample)
        extent = None if own_frames is None else _windows(own_frames, spec.input_stack, spec.input_subsample)
        for layer, (name, lstm) in enumerate(zip(encoder_layer_names(spec), self.encoder)):
            if layer == spec.encoder_pre_layers:
                x = stack_frames(x, spec.stack_time_factor, spec.stack_time_factor)
                extent = None if extent is None else _windows(extent, spec.stack_time_factor, spec.stack_time_factor)
            if layer > 0:
                x = self.dropout(x, training=training)
            x = self._lstm(name, lstm, x, training, extent)
        return self._dense("joint.encoder", self.joint_encoder, x, training, extent)

    def predict_net(self, labels: tf.Tensor, label_lengths: tf.Tensor, training: bool = False,
                    own_positions: tf.Tensor | None = None) -> tf.Tensor:
        """(batch, U) labels -> g, (batch, U + 1, prediction_units): the start symbol (the blank)
        first; labels at or past ``label_lengths`` are read as the blank. ``own_positions``: how many
        of the U + 1 are the batch's own (``lattice_of``), as ``encode``'s ``own_frames``."""
        blank = self.spec.blank_index
        inside = tf.range(tf.shape(labels)[1])[None, :] < label_lengths[:, None]
        padded = tf.pad(tf.where(inside, labels, blank), [[0, 0], [1, 0]], constant_values=blank)
        x = gather_rows(tf.convert_to_tensor(self.embedding.embeddings), padded)
        for layer, (name, lstm) in enumerate(zip(prediction_layer_names(self.spec), self.prediction)):
            if layer > 0:
                x = self.dropout(x, training=training)
            x = self._lstm(name, lstm, x, training, own_positions)
        return x

    def joint(self, encoded: tf.Tensor, predicted: tf.Tensor) -> tf.Tensor:
        """f (batch, T', joint_units) and g (batch, U + 1, prediction_units) -> log-probabilities
        (batch, T', U + 1, symbols), float32, over every cell of the padded lattice (inference
        and tests; training computes only the cells within the lengths, ``lattice``)."""
        projected = self._dense("joint.prediction", self.joint_prediction, predicted, False)
        return self._joint_output(encoded[:, :, None, :] + projected[:, None, :, :], False)

    def lattice(self, encoded: tf.Tensor, predicted: tf.Tensor, labels: tf.Tensor, output_lengths: tf.Tensor,
                label_lengths: tf.Tensor, training: bool = False,
                own_positions: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """What the transducer loss reads of the joint: (log P(blank | t, u), log P(y_{u+1} | t, u)),
        each (batch, T', U + 1), -inf outside each utterance's lengths and for the emission at
        u = U (``loss.transducer_lattice`` of ``joint``, within the lengths).

        The joint runs on the cells within the lengths only, packed: its (cells, joint_units)
        hidden layer is the step's largest tensor, and a batch of random lengths pads its lattice
        to two or three times the cells it holds. ``own_positions``: as ``predict_net``'s.
        """
        shape = tf.shape(encoded)
        batch, frames, width = shape[0], shape[1], shape[2]
        positions = tf.shape(predicted)[1]
        inside = ((tf.range(frames)[None, :] < output_lengths[:, None])[:, :, None]
                  & (tf.range(positions)[None, :] <= label_lengths[:, None])[:, None, :])
        cells = tf.cast(tf.where(inside), tf.int32)  # (cells, 3): row, t, u
        rows, t, u = cells[:, 0], cells[:, 1], cells[:, 2]
        projected = self._dense("joint.prediction", self.joint_prediction, predicted, training, own_positions)
        projected = tf.reshape(projected, tf.stack([-1, width]))
        hidden = (gather_rows(tf.reshape(encoded, tf.stack([-1, width])), rows * frames + t)
                  + gather_rows(projected, rows * positions + u))
        log_probs = self._joint_output(hidden, training)  # (cells, symbols)
        blank = self.spec.blank_index
        cell_label_lengths = tf.gather(label_lengths, rows)
        label_index = tf.stack([rows, tf.minimum(u, tf.shape(labels)[1] - 1)], axis=1)
        next_label = tf.where(u < cell_label_lengths, tf.gather_nd(labels, label_index), blank)
        emit = tf.gather(log_probs, next_label, batch_dims=1)
        never = tf.constant(float("-inf"), log_probs.dtype)
        emit = tf.where(u == cell_label_lengths, never, emit)  # no label left to emit
        dense = tf.stack([batch, frames, positions])
        return (tf.where(inside, tf.scatter_nd(cells, log_probs[:, blank], dense), never),
                tf.where(inside, tf.scatter_nd(cells, emit, dense), never))

    def lattice_of(self, features: tf.Tensor, labels: tf.Tensor, output_lengths: tf.Tensor,
                   label_lengths: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """The training pass: ``lattice`` of the batch; ``labels`` (batch, U) right-padded.

        Two degenerate batches are padded here so that the graph never meets an empty axis: a
        batch too short for one encoder frame gets zero frames up to one (every utterance still
        has output length 0, so loss 0 and zero gradient), and a batch without labels one blank
        column (every label length is still 0). In the graph, not on the host, so that the
        int8 ranges know which frames and positions are the batch's own.
        """
        frames, columns = tf.shape(features)[1], tf.shape(labels)[1]
        missing = tf.maximum(self.spec.input_frames_for(1) - frames, 0)
        features = tf.cond(missing > 0, lambda: tf.pad(features, [[0, 0], [0, missing], [0, 0]]), lambda: features)
        labels = tf.cond(columns > 0, lambda: labels,
                         lambda: tf.fill(tf.stack([tf.shape(labels)[0], 1]), tf.constant(self.spec.blank_index,
                                                                                         labels.dtype)))
        encoded = self.encode(features, training=training, own_frames=frames)
        predicted = self.predict_net(labels, label_lengths, training=training, own_positions=columns + 1)
        return self.lattice(encoded, predicted, labels, output_lengths, label_lengths, training=training,
                            own_positions=columns + 1)

    def _joint_output(self, hidden: tf.Tensor, training: bool) -> tf.Tensor:
        """activation -> dropout -> joint.output -> log-softmax over the last axis (float32 under a
        mixed precision, whose half-type logits are widened first)."""
        hidden = tf.nn.relu(hidden) if self.spec.joint_activation == "relu" else tf.tanh(hidden)
        hidden = self.dropout(hidden, training=training)
        logits = self._dense("joint.output", self.joint_output, hidden, training)
        if logits.dtype in (tf.bfloat16, tf.float16):
            logits = tf.cast(logits, tf.float32)
        return tf.nn.log_softmax(logits, axis=-1)

    def _lstm(self, name: str, lstm: SequenceLSTM, x: tf.Tensor, training: bool, extent: tf.Tensor | None) -> tf.Tensor:
        """The LSTM layer ``name`` of the layout: its own call, or int8-emulated's quantized loop."""
        if self.int8 is None:
            return lstm(x, training=training)
        return self.int8.lstm(name, lstm, x, training, extent)

    def _dense(self, name: str, dense: keras.layers.Dense, x: tf.Tensor, training: bool,
               extent: tf.Tensor | None = None) -> tf.Tensor:
        """One of the joint's projections, fake-quantized when int8-emulated."""
        if self.int8 is None:
            return dense(x)
        return self.int8.dense(name, dense, x, training, extent)


def stack_frames(x: tf.Tensor, width: int, stride: int) -> tf.Tensor:
    """(batch, frames, features) -> (batch, windows, width * features): whole windows of ``width``
    frames, ``stride`` apart, each window's frames side by side in time order (the reference's
    ``stack_frames``). Where windows do not overlap (stride = width, MLPerf's) a reshape of the
    frames the windows cover; otherwise a gather of each window's frames."""
    shape = tf.shape(x)
    batch, frames, features = shape[0], shape[1], x.shape[2]
    windows = tf.maximum((frames - width) // stride + 1, 0)
    if stride == width:
        return tf.reshape(x[:, : windows * width], tf.stack([batch, windows, width * features]))
    index = tf.range(windows)[:, None] * stride + tf.range(width)[None, :]  # (windows, width)
    return tf.reshape(tf.gather(x, index, axis=1), tf.stack([batch, windows, width * features]))


def _windows(frames: tf.Tensor, width: int, stride: int) -> tf.Tensor:
    """How many windows ``stack_frames`` makes of ``frames`` frames (``spec.stacked_frames``)."""
    return tf.maximum((frames - width) // stride + 1, 0)


@tf.custom_gradient  # type: ignore[untyped-decorator]
def gather_rows(table: tf.Tensor, indices: tf.Tensor) -> tuple[tf.Tensor, _RowGradient]:
    """``tf.gather(table, indices)`` along the first axis, with a dense gradient (a segment sum)."""
    rows = tf.gather(table, indices)

    def gradient(upstream: tf.Tensor) -> tuple[tf.Tensor, None]:
        return tf.math.unsorted_segment_sum(upstream, indices, tf.shape(table)[0]), None

    return rows, gradient


def _lstm(units: int, spec: RNNTModelSpec, fused: bool, name: str, policy: str | None) -> SequenceLSTM:
    """The spec's init: Xavier-uniform over each whole matrix (Keras's fans are the layout's rows
    and columns, the four gates together), zero biases but the forget gate's."""
    return SequenceLSTM(units, fused, kernel_initializer="glorot_uniform", recurrent_initializer="glorot_uniform",
                        bias_initializer=ForgetGateBias(spec.lstm_forget_bias), unit_forget_bias=False, name=name,
                        dtype=policy)


def _dense(units: int, name: str, policy: str | None) -> keras.layers.Dense:
    return keras.layers.Dense(units, kernel_initializer="glorot_uniform", bias_initializer="zeros", name=name,
                              dtype=policy)
