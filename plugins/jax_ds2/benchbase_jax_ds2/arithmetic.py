"""How every family's matmuls compute in ``ModelSpec.precision``: the operand type, XLA's matmul
precision, and the CPU's bf16 and fp16 paths (``Arithmetic``); and the float32 matmul precision of
everything a model does not set itself (``in_precision``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from benchbase.specs import ModelSpec
from benchbase_jax_ds2.cpu_bf16 import native_bf16_dots

__all__ = ["HIGHEST", "Arithmetic", "arithmetic", "in_precision"]

HIGHEST = lax.Precision.HIGHEST  # ModelSpec.precision "fp32": no TF32 or bf16 passes on GPUs


class Arithmetic(NamedTuple):
    """How the model's matmuls and the convolution compute in the spec's precision.

    Operands are cast to ``operands`` and accumulated in float32 (``preferred_element_type``),
    so bf16 and fp16 run the tensor cores' formats with float32 master weights, float32
    accumulators, and float32 elementwise work (gates, cell state, BatchNorm, log-softmax),
    as cuDNN's half-precision RNNs do; tf32 keeps float32 operands at XLA's default
    (TF32 tensor-core) precision; fp32 and int8-emulated compute in true float32.

    On XLA's CPU, bf16 multiplies bfloat16 operands natively (YNNPACK's bf16 dot, float32 result)
    where ``benchbase_jax_ds2.cpu_bf16.native_bf16_dots`` finds that this jaxlib and CPU can, with
    ``ordered`` on: each dot is computed with its result's indices in operand order (the canonical
    (M, K) x (K, N) form that path takes) and transposed afterwards, behind an optimization
    barrier, which keeps XLA's simplifier from folding the transpose back into the dot as swapped
    operands, a form XLA's own dot kernel cannot run in bf16 x bf16 -> f32.

    ``rounded``: elsewhere on a CPU (fp16, or no native bf16 dot) the operands are rounded to the
    half type and multiplied in float32. That is the same number: the product of two bf16 (fp16)
    values is exact in float32, and the sum is float32 either way.
    """

    operands: Any
    precision: lax.Precision
    rounded: bool = False
    ordered: bool = False

    def operand(self, x: jax.Array) -> jax.Array:
        """``x`` as a matmul operand: in the half type, or rounded to it (``rounded``)."""
        low = x.astype(self.operands)
        return low.astype(jnp.float32) if self.rounded else low

    def dot(self, subscripts: str, x: jax.Array, y: jax.Array) -> jax.Array:
        x, y = self.operand(x), self.operand(y)
        inputs, result = subscripts.split("->")
        left, right = inputs.split(",")
        order = "".join([index for index in left if index not in right] + [i for i in right if i not in left])
        if not self.ordered or order == result:
            return jnp.einsum(subscripts, x, y, precision=self.precision, preferred_element_type=jnp.float32)
        product = jnp.einsum(f"{inputs}->{order}", x, y, precision=self.precision, preferred_element_type=jnp.float32)
        return jnp.einsum(f"{order}->{result}", lax.optimization_barrier(product))


def arithmetic(spec: ModelSpec, platform: str = "cpu") -> Arithmetic:
    """The arithmetic of ``spec.precision`` on a device of ``platform`` ("cpu", "gpu")."""
    operands = {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(spec.precision, jnp.float32)
    if operands is not jnp.float32 and platform == "cpu":
        if operands is jnp.bfloat16 and native_bf16_dots():
            return Arithmetic(operands, HIGHEST, ordered=True)
        return Arithmetic(operands, HIGHEST, rounded=True)
    return Arithmetic(operands, HIGHEST if spec.precision in ("fp32", "int8-emulated") else lax.Precision.DEFAULT)


def in_precision(spec: ModelSpec, function):
    """Runs ``function`` (while it is traced) with float32 matmuls everywhere the model does not
    set its own, a library's loss (optax's CTC) included: true float32, or TF32 for the spec's tf32."""
    precision = "tensorfloat32" if spec.precision == "tf32" else "highest"

    def traced(*args):
        with jax.default_matmul_precision(precision):
            return function(*args)

    return traced
