"""ds2-mini's convolution and LSTMs, and rnnt-mini's LSTMs, in PyTorch, TensorFlow and JAX alone,
forward and backward, on one thread.

    python benchmarks/standalone_ds2.py                       # 30 steps per framework and operation
    python benchmarks/standalone_ds2.py --steps 50 --json standalone_ds2.json
    python benchmarks/standalone_ds2.py --frameworks torch,jax --operations lstm

The parity matrix (benchmarks/parity_matrix.py) names what costs the JAX backend's ds2-mini step
most: the convolution and the LSTMs' loops over frames. This script times those operations with
each framework's own building blocks, written as its documentation writes them, and no benchbase
code, at ds2-mini's shapes (the constants below, each naming the workload field it mirrors):

- ``conv``: the 11-wide, stride-2 valid convolution from the features to its channels, without a
  bias; its kernel's gradient (the features need none). torch ``nn.Conv1d`` on (batch, features,
  frames); Keras ``Conv1D`` on (batch, frames, features); JAX ``lax.conv_general_dilated`` in
  Keras's layout.
- ``lstm``: two unidirectional LSTM layers over the convolution's output frames; the gradients
  of every weight and of the input. torch ``nn.LSTM(num_layers=2, batch_first=True)``; two Keras
  ``LSTM(return_sequences=True)``; JAX, each layer's input projection as one matmul over all
  frames and a ``lax.scan`` of the cell, differentiated by ``jax.grad``.
- ``rnnt``: rnnt-mini's recurrences, the same three ways: its encoder's LSTM over the stacked
  frames (3 frames of features side by side, every third kept), the time stacking of its output
  (2 frames side by side), the second encoder LSTM, and the prediction network's LSTM over a
  batch's longest transcript (its embeddings); the gradients of every weight and input.

Every framework computes in float32 on one compute thread, set as the parity matrix's backends set
it (``standalone.timing.one_thread``: torch ``set_num_threads(1)``, TensorFlow's intra- and
inter-op pools of one, XLA's Eigen pool off and its client created on one CPU), on the same
random inputs. After ``--warm-up`` untimed
steps each (tracing and compilation), ``--steps`` steps are timed with the frameworks alternating
in rotating order. It prints, per operation, each framework's median milliseconds, p25-p75 and the
ratio to the fastest; ``--json`` writes the same with the versions and shapes. docs/BENCHMARKS.md,
"Framework parity: the matrix", sets these ratios beside the matrix's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the standalone/ folder beside this script

from standalone.timing import one_thread, time_rotating

BATCH = 32  # hardware_profiles/cpu.yaml: pipeline.global_batch, the matrix's batch
FEATURES = 93  # ds2-mini features: mel_bands (80) + mfcc (13)
FRAMES = 418  # the median padded frames of the matrix's ds2-mini batches (docs/BENCHMARKS.md)
CONV_CHANNELS = 96  # ds2-mini model.conv_channels
CONV_WIDTH = 11  # ds2-mini model.conv_width
CONV_STRIDE = 2  # ds2-mini model.conv_stride
LSTM_LAYERS = 2  # ds2-mini model.lstm_layers (unidirectional)
LSTM_UNITS = 96  # ds2-mini model.lstm_units
OUTPUT_FRAMES = (FRAMES - CONV_WIDTH) // CONV_STRIDE + 1  # the convolution's output, the LSTMs' input
RNNT_INPUT_STACK = 3  # rnnt-mini model.input_stack (and input_subsample: every third stack kept)
RNNT_TIME_STACK = 2  # rnnt-mini model.stack_time_factor
RNNT_ENCODER_UNITS = 128  # rnnt-mini model.encoder_units (one LSTM before the time stacking, one after)
RNNT_EMBEDDING = 32  # rnnt-mini model.prediction_embedding
RNNT_PREDICTION_UNITS = 64  # rnnt-mini model.prediction_units (one LSTM)
RNNT_LABELS = 71  # a batch of 32's longest transcript, 70 characters (median over random batches), + the blank
RNNT_STACKED_FRAMES = FRAMES // RNNT_INPUT_STACK  # the first encoder LSTM's frames
RNNT_ENCODER_FRAMES = RNNT_STACKED_FRAMES // RNNT_TIME_STACK  # the second's: the encoder's output

FRAMEWORKS = ("torch", "tf", "jax")
OPERATIONS = ("conv", "lstm", "rnnt")
Step = Callable[[], None]
"""One forward and backward pass of an operation, finished when it returns."""


# -- torch ---------------------------------------------------------------------------------------------


def torch_steps(features, frames) -> dict[str, Step]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    conv = nn.Conv1d(FEATURES, CONV_CHANNELS, CONV_WIDTH, stride=CONV_STRIDE, bias=False)
    lstm = nn.LSTM(CONV_CHANNELS, LSTM_UNITS, num_layers=LSTM_LAYERS, batch_first=True)
    conv_input = torch.from_numpy(features).transpose(1, 2).contiguous()  # (batch, features, frames)
    lstm_input = torch.from_numpy(frames).requires_grad_()

    def conv_step() -> None:
        conv.zero_grad()
        conv(conv_input).sum().backward()

    def lstm_step() -> None:
        lstm.zero_grad()
        lstm_input.grad = None
        lstm(lstm_input)[0].sum().backward()

    pre = nn.LSTM(FEATURES * RNNT_INPUT_STACK, RNNT_ENCODER_UNITS, batch_first=True)
    post = nn.LSTM(RNNT_ENCODER_UNITS * RNNT_TIME_STACK, RNNT_ENCODER_UNITS, batch_first=True)
    prediction = nn.LSTM(RNNT_EMBEDDING, RNNT_PREDICTION_UNITS, batch_first=True)
    stacked, embedded = (torch.from_numpy(array).requires_grad_() for array in rnnt_inputs(features))

    def rnnt_step() -> None:
        for module in (pre, post, prediction):
            module.zero_grad()
        stacked.grad = embedded.grad = None
        encoded = pre(stacked)[0][:, : RNNT_ENCODER_FRAMES * RNNT_TIME_STACK]
        encoded = post(encoded.reshape(BATCH, RNNT_ENCODER_FRAMES, -1))[0]
        (encoded.sum() + prediction(embedded)[0].sum()).backward()

    return {"conv": conv_step, "lstm": lstm_step, "rnnt": rnnt_step}


# -- TensorFlow ----------------------------------------------------------------------------------------


def tf_steps(features, frames) -> dict[str, Step]:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    conv = keras.layers.Conv1D(CONV_CHANNELS, CONV_WIDTH, strides=CONV_STRIDE, use_bias=False)
    lstms = [keras.layers.LSTM(LSTM_UNITS, return_sequences=True) for _ in range(LSTM_LAYERS)]
    conv_input, lstm_input = tf.constant(features), tf.constant(frames)

    @tf.function
    def conv_gradient(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(conv(x))
        return [loss, *tape.gradient(loss, conv.trainable_variables)]

    @tf.function
    def lstm_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x
            for layer in lstms:
                y = layer(y)
            loss = tf.reduce_sum(y)
        return [loss, *tape.gradient(loss, [x, *(v for layer in lstms for v in layer.trainable_variables)])]

    pre, post, prediction = (keras.layers.LSTM(units, return_sequences=True) for units in
                             (RNNT_ENCODER_UNITS, RNNT_ENCODER_UNITS, RNNT_PREDICTION_UNITS))
    stacked, embedded = (tf.constant(array) for array in rnnt_inputs(features))

    @tf.function
    def rnnt_gradient(stacked, embedded):
        with tf.GradientTape() as tape:
            tape.watch([stacked, embedded])
            encoded = pre(stacked)[:, : RNNT_ENCODER_FRAMES * RNNT_TIME_STACK]
            encoded = post(tf.reshape(encoded, (BATCH, RNNT_ENCODER_FRAMES, -1)))
            loss = tf.reduce_sum(encoded) + tf.reduce_sum(prediction(embedded))
        weights = [v for layer in (pre, post, prediction) for v in layer.trainable_variables]
        return [loss, *tape.gradient(loss, [stacked, embedded, *weights])]

    def finished(results) -> None:  # the loss too: what no result needs, a graph may prune
        for result in results:
            result.numpy()

    return {"conv": lambda: finished(conv_gradient(conv_input)), "lstm": lambda: finished(lstm_gradient(lstm_input)),
            "rnnt": lambda: finished(rnnt_gradient(stacked, embedded))}


# -- JAX -----------------------------------------------------------------------------------------------

def jax_steps(features, frames) -> dict[str, Step]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    rng = np.random.default_rng(0)
    kernel = jnp.asarray(rng.uniform(-0.05, 0.05, (CONV_WIDTH, FEATURES, CONV_CHANNELS)).astype(np.float32))
    def lstm_weights(inputs: int, units: int) -> tuple:
        return tuple(jnp.asarray(rng.uniform(-0.1, 0.1, shape).astype(np.float32))
                     for shape in ((inputs, 4 * units), (units, 4 * units), (4 * units,)))

    sizes = [CONV_CHANNELS] + [LSTM_UNITS] * LSTM_LAYERS
    layers = [lstm_weights(sizes[i], LSTM_UNITS) for i in range(LSTM_LAYERS)]
    rnnt_layers = (lstm_weights(FEATURES * RNNT_INPUT_STACK, RNNT_ENCODER_UNITS),
                   lstm_weights(RNNT_ENCODER_UNITS * RNNT_TIME_STACK, RNNT_ENCODER_UNITS),
                   lstm_weights(RNNT_EMBEDDING, RNNT_PREDICTION_UNITS))
    stacked, embedded = (jnp.asarray(array) for array in rnnt_inputs(features))
    conv_input, lstm_input = jnp.asarray(features), jnp.asarray(frames)

    def conv_loss(kernel, x):
        y = lax.conv_general_dilated(x, kernel, (CONV_STRIDE,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"))
        return jnp.sum(y)

    def lstm_layer(weights, x):  # x: time-major (frames, batch, inputs)
        input_kernel, recurrent_kernel, bias = weights
        projected = x @ input_kernel + bias  # every frame's input projection in one matmul

        def cell(carry, z):
            h, c = carry
            i, f, g, o = jnp.split(z + h @ recurrent_kernel, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((x.shape[1], recurrent_kernel.shape[0]), x.dtype)
        return lax.scan(cell, (zeros, zeros), projected)[1]

    def lstm_loss(layers, x):
        y = jnp.swapaxes(x, 0, 1)
        for weights in layers:
            y = lstm_layer(weights, y)
        return jnp.sum(y)

    def rnnt_loss(layers, stacked, embedded):
        pre, post, prediction = layers
        encoded = lstm_layer(pre, jnp.swapaxes(stacked, 0, 1))[: RNNT_ENCODER_FRAMES * RNNT_TIME_STACK]
        encoded = jnp.swapaxes(encoded, 0, 1).reshape(BATCH, RNNT_ENCODER_FRAMES, -1)
        encoded = lstm_layer(post, jnp.swapaxes(encoded, 0, 1))
        return jnp.sum(encoded) + jnp.sum(lstm_layer(prediction, jnp.swapaxes(embedded, 0, 1)))

    # The loss too: the gradient of a sum needs no forward pass, which XLA would then skip.
    conv_gradient = jax.jit(jax.value_and_grad(conv_loss))
    lstm_gradient = jax.jit(jax.value_and_grad(lstm_loss, argnums=(0, 1)))
    rnnt_gradient = jax.jit(jax.value_and_grad(rnnt_loss, argnums=(0, 1, 2)))
    return {"conv": lambda: jax.block_until_ready(conv_gradient(kernel, conv_input)),
            "lstm": lambda: jax.block_until_ready(lstm_gradient(layers, lstm_input)),
            "rnnt": lambda: jax.block_until_ready(rnnt_gradient(rnnt_layers, stacked, embedded))}


BUILDERS = {"torch": torch_steps, "tf": tf_steps, "jax": jax_steps}


def rnnt_inputs(features):
    """rnnt-mini's encoder input, ``features`` stacked 3 frames side by side with every third stack
    kept, (batch, stacked frames, 3 x features); and its prediction network's input, a batch's
    embedded labels, (batch, labels, embedding): float32 NumPy arrays."""
    import numpy as np

    frames = RNNT_STACKED_FRAMES * RNNT_INPUT_STACK
    stacked = np.ascontiguousarray(features[:, :frames].reshape(BATCH, RNNT_STACKED_FRAMES, -1))
    embedded = np.random.default_rng(1).standard_normal((BATCH, RNNT_LABELS, RNNT_EMBEDDING), dtype=np.float32)
    return stacked, embedded


def versions(frameworks: list[str]) -> dict[str, str]:
    import importlib

    modules = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}
    return {name: importlib.import_module(modules[name]).__version__ for name in frameworks}


def main() -> None:
    arguments = _parser().parse_args()
    frameworks = _chosen(arguments.frameworks, FRAMEWORKS, "framework")
    operations = _chosen(arguments.operations, OPERATIONS, "operation")
    one_thread(frameworks)
    import numpy as np

    rng = np.random.default_rng(0)
    features = rng.standard_normal((BATCH, FRAMES, FEATURES), dtype=np.float32)
    frames = rng.standard_normal((BATCH, OUTPUT_FRAMES, CONV_CHANNELS), dtype=np.float32)
    built = {name: BUILDERS[name](features, frames) for name in frameworks}
    print(f"batch {BATCH}, {FRAMES} frames x {FEATURES} features -> conv {CONV_WIDTH} wide, stride {CONV_STRIDE}, "
          f"{CONV_CHANNELS} channels -> {OUTPUT_FRAMES} frames -> {LSTM_LAYERS} LSTM x {LSTM_UNITS}; fp32, 1 thread; "
          f"{arguments.steps} steps; {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.2f}")
    results = {}
    for operation in operations:
        steps = {name: built[name][operation] for name in frameworks}
        results[operation] = cells = time_rotating(steps, arguments.steps, arguments.warm_up)
        for name, cell in cells.items():
            print(f"{operation:<6}{name:<7}{cell['median_ms']:>9.2f} ms ({cell['p25_ms']:.2f}-{cell['p75_ms']:.2f})"
                  f"{cell['ratio']:>7.2f}", flush=True)
    if arguments.json:
        shapes = {"batch": BATCH, "frames": FRAMES, "features": FEATURES, "conv_channels": CONV_CHANNELS,
                  "conv_width": CONV_WIDTH, "conv_stride": CONV_STRIDE, "lstm_layers": LSTM_LAYERS,
                  "lstm_units": LSTM_UNITS, "output_frames": OUTPUT_FRAMES,
                  "rnnt": {"stacked_frames": RNNT_STACKED_FRAMES, "encoder_frames": RNNT_ENCODER_FRAMES,
                           "encoder_units": RNNT_ENCODER_UNITS, "labels": RNNT_LABELS,
                           "prediction_units": RNNT_PREDICTION_UNITS}}
        document = {"steps": arguments.steps, "shapes": shapes, "versions": versions(frameworks),
                    "operations": results}
        arguments.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def _chosen(names: str, known: tuple[str, ...], kind: str) -> list[str]:
    chosen = names.split(",")
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise SystemExit(f"unknown {kind} {', '.join(unknown)}: choose from {', '.join(known)}")
    return chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per framework and operation (default: 30)")
    parser.add_argument("--warm-up", type=int, default=3, help="untimed steps first (default: 3)")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated (default: all)")
    parser.add_argument("--operations", default=",".join(OPERATIONS), help="comma-separated (default: all)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    return parser


if __name__ == "__main__":
    main()
