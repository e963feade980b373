"""The RNN-T greedy search: how the harness turns ``predict()``'s encoder projection into text.

At each frame t of an utterance, from the prediction network's state after the symbols emitted
so far (the start symbol, the blank, before the first), the search takes the most probable
symbol of the joint, argmax_k of ``joint.output`` over activation(f(t) + joint.prediction(g))
(the log-softmax does not change the argmax; a tie goes to the lowest index). A label is
emitted and fed to the prediction network, and the same frame is tried again; the blank, or
``max_symbols_per_frame`` labels at this frame, move on to the next frame. The prediction
network advances only on an emitted label. This is MLPerf's and torchaudio's greedy search.

Every utterance of the batch steps through the frames together (rows that have emitted their
blank or run out of frames wait), and only the rows that emitted advance the prediction
network, in one matmul per layer. The search runs in float32: the harness runs it at every
evaluation, and float32's matmuls are twice as fast as float64's and what backends compute
in; only a near-tie of two symbols' logits, within float32's rounding, can decide otherwise.

An int8-emulated model is searched as it evaluates: its prediction network and joint
fake-quantized with the stored activation ranges (``benchbase.families.rnnt.quantization``);
the encoder projection comes quantized from ``predict()``. A range still 0 (a model never
trained) takes the max|x| of the tensor at hand: the embedding table, or one step's rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.families.rnnt.quantization import Quantizer
from benchbase.families.rnnt.reference import lstm_cell
from benchbase.families.rnnt.spec import RNNTModelSpec
from benchbase.families.rnnt.weight_layout import prediction_layer_names

__all__ = ["greedy_decode"]


def greedy_decode(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, encoded: np.ndarray,
                  output_lengths: np.ndarray, max_symbols_per_frame: int) -> list[list[int]]:
    """Each utterance's labels (no blanks), found by the greedy search.

    ``encoded``: ``predict()``'s (batch, T', joint_units) encoder projection; frames at or past
    ``output_lengths`` are not read. ``max_symbols_per_frame`` >= 1 labels at most per frame.
    """
    if max_symbols_per_frame < 1:
        raise ValueError(f"max_symbols_per_frame must be at least 1, got {max_symbols_per_frame}")
    encoded = np.asarray(encoded, dtype=np.float32)
    output_lengths = np.asarray(output_lengths)
    if encoded.ndim != 3 or output_lengths.shape != (encoded.shape[0],):
        raise ValueError(f"encoded must be (batch, frames, joint_units) and output_lengths (batch,), got "
                         f"{encoded.shape} and {output_lengths.shape}")
    network = _Predictor(weights, model, encoded.shape[0])
    transcripts: list[list[int]] = [[] for _ in range(encoded.shape[0])]
    for frame in range(min(encoded.shape[1], int(output_lengths.max(initial=0)))):
        rows = np.flatnonzero(frame < output_lengths)
        for _ in range(max_symbols_per_frame):
            symbols = network.best_symbols(encoded[rows, frame], rows)
            emitted = symbols != model.blank_index
            rows, symbols = rows[emitted], symbols[emitted]
            if rows.size == 0:
                break
            for row, symbol in zip(rows.tolist(), symbols.tolist()):
                transcripts[row].append(symbol)
            network.advance(rows, symbols)
    return transcripts


class _Predictor:
    """The prediction network's state for every row of the batch, and the joint, in float32.

    ``projected`` is joint.prediction(g) of each row's last output. The first layer's input
    part is a lookup: ``embedding @ input_kernel + bias`` for every symbol, computed once.
    """

    def __init__(self, weights: Mapping[str, np.ndarray], model: RNNTModelSpec, batch: int) -> None:
        w = {name: np.asarray(value, dtype=np.float32) for name, value in weights.items()}
        self.quantizer = quantizer = Quantizer(w, model, training=False)
        self.names = prediction_layer_names(model)
        self.layers = [(quantizer.kernel(f"{prefix}.input_kernel", w[f"{prefix}.input_kernel"]),
                        quantizer.kernel(f"{prefix}.recurrent_kernel", w[f"{prefix}.recurrent_kernel"]),
                        w[f"{prefix}.bias"], quantizer.recurrent_state(prefix)) for prefix in self.names]
        first_kernel, _, first_bias, _ = self.layers[0]
        embedded = quantizer.input(self.names[0], w["prediction.embedding"])
        self.first_inputs = embedded @ first_kernel + first_bias  # (symbols, 4 * units)
        self.projection = (quantizer.kernel("joint.prediction.kernel", w["joint.prediction.kernel"]),
                           w["joint.prediction.bias"])
        self.output = (quantizer.kernel("joint.output.kernel", w["joint.output.kernel"]), w["joint.output.bias"])
        self.relu = model.joint_activation == "relu"
        units = model.prediction_units
        self.h = np.zeros((len(self.layers), batch, units), dtype=np.float32)
        self.c = np.zeros_like(self.h)
        self.projected = np.empty((batch, model.joint_units), dtype=np.float32)
        self.advance(np.arange(batch), np.full(batch, model.blank_index))  # the start symbol

    def best_symbols(self, encoded: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """argmax over the symbols of the joint's logits for ``rows``, at their frames ``encoded``."""
        hidden = encoded + self.projected[rows]
        hidden = np.maximum(hidden, 0.0, out=hidden) if self.relu else np.tanh(hidden, out=hidden)
        kernel, bias = self.output
        return np.argmax(self.quantizer.input("joint.output", hidden) @ kernel + bias, axis=1)

    def advance(self, rows: np.ndarray, symbols: np.ndarray) -> None:
        """Feed ``symbols`` to the prediction network of ``rows``; the other rows keep their state."""
        x = self.first_inputs[symbols]
        for layer, (input_kernel, recurrent_kernel, bias, state) in enumerate(self.layers):
            if layer > 0:
                x = self.quantizer.input(self.names[layer], x) @ input_kernel + bias
            h, c = lstm_cell(x + state(self.h[layer, rows]) @ recurrent_kernel, self.c[layer, rows])
            self.h[layer, rows], self.c[layer, rows] = h, c
            x = h
        kernel, bias = self.projection
        self.projected[rows] = self.quantizer.input("joint.prediction", x) @ kernel + bias
