"""conformer-mini in plain JAX: parameters in dicts, jax.numpy and lax (XLA's grouped convolution
for the depthwise one), optax.ctc_loss, optax.clip_by_global_norm and optax.adamw, the whole step
one jax.jit with its state donated. Import it after XLA_FLAGS is set (``one_thread`` of
benchmarks/standalone_conformer.py)."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from standalone.conformer_mini import (
    ATTENTION_HEADS,
    BATCH,
    BATCHNORM_EPSILON,
    BATCHNORM_MOMENTUM,
    BETA1,
    BETA2,
    BLANK,
    CLIP_NORM,
    CONV_KERNEL_SIZE,
    DROPOUT,
    ENCODER_DIM,
    ENCODER_LAYERS,
    EPSILON,
    HEAD_DIM,
    HIDDEN,
    LAYERNORM_EPSILON,
    LEARNING_RATE,
    OP_ATTENTION,
    OP_DEPTHWISE,
    OP_DEPTHWISE_SHIFTS,
    OP_DOT_PRODUCT,
    OP_FEED_FORWARD,
    OP_OUTPUT,
    OP_PROJECTION,
    OP_QKV,
    OP_SUBSAMPLING,
    PROJECTED,
    SUBSAMPLING_LAYERS,
    SYMBOLS,
    WEIGHT_DECAY,
    Batch,
    key_valid,
    sinusoids,
)

__all__ = ["operations", "training_step"]


def initial_parameters(seed: int) -> dict:
    """Xavier-uniform kernels (drawn with NumPy), zero biases, unit norm scales."""
    rng, d = np.random.default_rng(seed), ENCODER_DIM

    def uniform(shape: tuple[int, ...], fan_in: int, fan_out: int) -> jax.Array:
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        return jnp.asarray(rng.uniform(-limit, limit, shape), jnp.float32)

    def dense(inputs: int, outputs: int) -> dict:
        return {"kernel": uniform((inputs, outputs), inputs, outputs), "bias": jnp.zeros(outputs)}

    def norm() -> dict:
        return {"scale": jnp.ones(d), "bias": jnp.zeros(d)}

    def feed_forward() -> dict:
        return {"norm": norm(), "inner": dense(d, HIDDEN), "outer": dense(HIDDEN, d)}

    def block() -> dict:
        return {"ff1": feed_forward(), "attention_norm": norm(), "qkv": dense(d, 3 * d),
                "attention_output": dense(d, d), "conv_norm": norm(), "glu": dense(d, 2 * d),
                "depthwise": uniform((CONV_KERNEL_SIZE, 1, d), CONV_KERNEL_SIZE, CONV_KERNEL_SIZE),
                "batchnorm": norm(), "conv_output": dense(d, d), "ff2": feed_forward(), "norm": norm()}

    convs = [{"kernel": uniform((3, 3, 1 if layer == 0 else d, d), 9 * (1 if layer == 0 else d), 9 * d),
              "bias": jnp.zeros(d)} for layer in range(SUBSAMPLING_LAYERS)]
    return {"convs": convs, "projection": dense(PROJECTED, d), "blocks": [block() for _ in range(ENCODER_LAYERS)],
            "final_norm": norm(), "output": dense(d, SYMBOLS)}


def dense(parameters: dict, x: jax.Array) -> jax.Array:
    return x @ parameters["kernel"] + parameters["bias"]


def layer_norm(parameters: dict, x: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(variance + LAYERNORM_EPSILON) * parameters["scale"] + parameters["bias"]


def dropout(x: jax.Array, key: jax.Array) -> jax.Array:
    return jnp.where(jax.random.bernoulli(key, 1.0 - DROPOUT, x.shape), x / (1.0 - DROPOUT), 0.0)


def subsampling_conv(parameters: dict, x: jax.Array) -> jax.Array:
    """(batch, time, frequency, channels) -> 3x3 stride-2 convolution, SAME padding, ReLU."""
    convolved = lax.conv_general_dilated(x, parameters["kernel"], (2, 2), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(convolved + parameters["bias"])


def forward(parameters: dict, statistics: list, features: jax.Array, keys: jax.Array, positions: jax.Array,
            key: jax.Array) -> tuple[jax.Array, list]:
    """(batch, frames, features) -> (logits, the BatchNorms' moved running statistics), in training."""
    sites = iter(jax.random.split(key, 1 + 4 * ENCODER_LAYERS))
    x = features[..., None]  # NHWC
    for conv in parameters["convs"]:
        x = subsampling_conv(conv, x)
    x = x.reshape(x.shape[0], x.shape[1], PROJECTED)  # row f * C + c
    x = dropout(dense(parameters["projection"], x) + positions, next(sites))
    moved = []
    for block, running in zip(parameters["blocks"], statistics):
        x = x + 0.5 * dropout(feed_forward(block["ff1"], x), next(sites))
        x = x + dropout(dense(block["attention_output"], self_attention(block, x, keys)), next(sites))
        convolved, moments = convolution(block, x)
        moved.append(tuple(BATCHNORM_MOMENTUM * old + (1.0 - BATCHNORM_MOMENTUM) * lax.stop_gradient(new)
                           for old, new in zip(running, moments)))
        x = x + dropout(convolved, next(sites))
        x = x + 0.5 * dropout(feed_forward(block["ff2"], x), next(sites))
        x = layer_norm(block["norm"], x)
    return dense(parameters["output"], layer_norm(parameters["final_norm"], x)), moved


def feed_forward(parameters: dict, x: jax.Array) -> jax.Array:
    return dense(parameters["outer"], jax.nn.silu(dense(parameters["inner"], layer_norm(parameters["norm"], x))))


def self_attention(block: dict, x: jax.Array, keys: jax.Array) -> jax.Array:
    """The attended values (batch, frames, d), before the output Linear."""
    batch, frames, d = x.shape
    qkv = dense(block["qkv"], layer_norm(block["attention_norm"], x))
    q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(batch, frames, ATTENTION_HEADS, HEAD_DIM) for i in range(3))
    return attention(q, k, v, keys).reshape(batch, frames, d)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, keys: jax.Array) -> jax.Array:
    """(batch, frames, heads, head_dim) each -> the same, a softmax over the valid keys."""
    scores = jnp.einsum("bqhc,bkhc->bhqk", q, k) / math.sqrt(HEAD_DIM)
    return jnp.einsum("bhqk,bkhc->bqhc", jax.nn.softmax(jnp.where(keys, scores, -1e9), axis=-1), v)


def depthwise(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """(batch, frames, d) * (width, 1, d): XLA's grouped convolution, SAME padding."""
    return lax.conv_general_dilated(x, kernel, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"),
                                    feature_group_count=ENCODER_DIM)


def shifted_depthwise(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``depthwise`` as a sum of shifted products (the jax backend's ``DEPTHWISE_AS_SHIFTS``)."""
    width, frames = kernel.shape[0], x.shape[1]
    padded = jnp.pad(x, ((0, 0), (width // 2, width // 2), (0, 0)))
    return sum(padded[:, tap:tap + frames] * kernel[tap, 0] for tap in range(width))


def batch_norm(parameters: dict, x: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """BatchNorm over every frame of the batch: (the output, (mean, variance))."""
    mean = jnp.mean(x, axis=(0, 1))
    variance = jnp.mean(jnp.square(x - mean), axis=(0, 1))
    normalized = (x - mean) / jnp.sqrt(variance + BATCHNORM_EPSILON)
    return normalized * parameters["scale"] + parameters["bias"], (mean, variance)


def convolution(block: dict, x: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """LayerNorm -> GLU -> depthwise conv -> BatchNorm -> swish -> Linear, and the batch's moments."""
    gated = jax.nn.glu(dense(block["glu"], layer_norm(block["conv_norm"], x)), axis=-1)
    normalized, moments = batch_norm(block["batchnorm"], depthwise(gated, block["depthwise"]))
    return dense(block["conv_output"], jax.nn.silu(normalized)), moments


def training_step(batch: Batch, seed: int) -> Callable[[], float]:
    """One training step on ``batch`` per call (one jitted program, the state donated); returns the loss."""
    optimizer = optax.chain(optax.clip_by_global_norm(CLIP_NORM),
                            optax.adamw(LEARNING_RATE, b1=BETA1, b2=BETA2, eps=EPSILON, weight_decay=WEIGHT_DECAY))
    parameters = initial_parameters(seed)
    statistics = [(jnp.zeros(ENCODER_DIM), jnp.ones(ENCODER_DIM)) for _ in range(ENCODER_LAYERS)]
    features, keys = jnp.asarray(batch.features), jnp.asarray(key_valid(batch.output_lengths))
    positions = jnp.asarray(sinusoids(keys.shape[-1]))
    frame_padding = (jnp.arange(keys.shape[-1])[None, :] >= batch.output_lengths[:, None]).astype(jnp.float32)
    labels = jnp.asarray(batch.labels)
    label_padding = (jnp.arange(labels.shape[1])[None, :] >= batch.label_lengths[:, None]).astype(jnp.float32)

    def loss(parameters: dict, statistics: list, key: jax.Array) -> tuple[jax.Array, list]:
        logits, moved = forward(parameters, statistics, features, keys, positions, key)
        return jnp.mean(optax.ctc_loss(logits, frame_padding, labels, label_padding, blank_id=BLANK)), moved

    def train(state: tuple, key: jax.Array) -> tuple[tuple, jax.Array]:
        parameters, statistics, optimizer_state = state
        (value, moved), gradients = jax.value_and_grad(loss, has_aux=True)(parameters, statistics, key)
        updates, optimizer_state = optimizer.update(gradients, optimizer_state, parameters)
        return (optax.apply_updates(parameters, updates), moved, optimizer_state), value

    compiled = jax.jit(train, donate_argnums=0)  # the state's buffers hold the next state
    state = [(parameters, statistics, optimizer.init(parameters))]
    key = [jax.random.key(seed)]

    def step() -> float:
        key[0], dropout_key = jax.random.split(key[0])
        state[0], value = compiled(state[0], dropout_key)
        return float(value)

    return step


def operations(batch: Batch, seed: int) -> dict[str, Callable[[], object]]:
    """Operation name (``conformer_mini.OPERATIONS``) -> a call of its forward and backward."""
    parameters, rng = initial_parameters(seed), np.random.default_rng(seed)
    block, frames = parameters["blocks"][0], int(batch.output_lengths.max())

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32))

    keys, lengths = jnp.asarray(key_valid(batch.output_lengths)), jnp.asarray(batch.output_lengths)
    features, encoded = jnp.asarray(batch.features[..., None]), normal(BATCH, frames, ENCODER_DIM)
    heads = tuple(normal(BATCH, frames, ATTENTION_HEADS, HEAD_DIM) for _ in range(3))
    conv_parameters = {"depthwise": block["depthwise"], "batchnorm": block["batchnorm"]}

    def inner_outer(p: dict, x: jax.Array) -> jax.Array:
        return dense(p["outer"], jax.nn.silu(dense(p["inner"], x)))

    def grouped(p: dict, x: jax.Array) -> jax.Array:
        return batch_norm(p["batchnorm"], depthwise(x, p["depthwise"]))[0]

    def shifted(p: dict, x: jax.Array) -> jax.Array:
        return batch_norm(p["batchnorm"], shifted_depthwise(x, p["depthwise"]))[0]

    def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths, implementation="xla")

    return {
        OP_PROJECTION: _gradients(dense, (parameters["projection"], normal(BATCH, frames, PROJECTED))),
        OP_FEED_FORWARD: _gradients(inner_outer, (block["ff1"], encoded)),
        OP_QKV: _gradients(dense, (block["qkv"], encoded)),
        OP_OUTPUT: _gradients(dense, (block["attention_output"], encoded)),
        OP_ATTENTION: _gradients(lambda q, k, v: attention(q, k, v, keys), heads),
        OP_DOT_PRODUCT: _gradients(dot_product_attention, heads),
        OP_DEPTHWISE: _gradients(grouped, (conv_parameters, encoded)),
        OP_DEPTHWISE_SHIFTS: _gradients(shifted, (conv_parameters, encoded)),
        # The features are data: no gradient of the convolution's input.
        OP_SUBSAMPLING: _gradients(subsampling_conv, (parameters["convs"][0],), (features,)),
    }


def _gradients(function: Callable, differentiated: tuple, constants: tuple = ()) -> Callable[[], object]:
    """A call (one jitted program) computes ``function(*differentiated, *constants)`` and the
    gradients of ``differentiated`` for a fixed random cotangent. The output is returned too: XLA
    would otherwise drop a forward pass that no gradient needs (a linear layer's), which eager
    PyTorch cannot."""
    shape = jax.eval_shape(function, *differentiated, *constants).shape
    cotangent = jnp.asarray(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))

    @jax.jit
    def gradients(differentiated: tuple, constants: tuple) -> tuple:
        output, backward = jax.vjp(lambda *arguments: function(*arguments, *constants), *differentiated)
        return output, backward(cotangent)

    return lambda: jax.block_until_ready(gradients(differentiated, constants))
