"""Whether XLA's CPU here multiplies bfloat16 matrices natively, into float32.

jaxlib's XLA hands a dot with bfloat16 operands and a float32 result (``preferred_element_type``)
to YNNPACK, whose kernels use AVX-512 BF16's dot-product instructions: 0.5-0.65x the float32
dot's time on ds2-mini's shapes (one core of an AVX-512 BF16 EPYC, jaxlib 0.10.2), where a bf16
result, or the operands rounded and multiplied in float32, take 1.0-1.2x. Only the canonical
form (M, K) x (K, N) -> (M, N) goes there: XLA's own dot kernel has no bf16 x bf16 -> f32 case
and fails at run time ("Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32") on
a dot the compiler left in another form, and older jaxlibs may have neither. So the native path
is taken only where the CPU has bf16 dot units, XLA is not held below AVX-512
(``--xla_cpu_max_isa``, benchbase.testing.isa) and a probe of that dot runs;
``Arithmetic.ordered`` keeps the model's dots in the canonical form. Everywhere else bf16
rounds the operands and multiplies in float32: the same products, at float32's speed.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from benchbase.telemetry.cpu_features import cpu_flags

__all__ = ["native_bf16_dots"]

BF16_DOT_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""/proc/cpuinfo flags of the instructions that multiply bfloat16 pairs into float32 sums."""


@functools.cache
def native_bf16_dots() -> bool:
    """True where XLA's CPU runs bf16 x bf16 -> f32 dots natively, and the CPU has units for them.

    Call it only once JAX's CPU client may be created (benchbase_jax_ds2.threads): the probe
    compiles and runs one small dot.
    """
    if not BF16_DOT_FLAGS & cpu_flags() or _isa_capped():
        return False
    operands = [np.full((16, 16), 1.5, jnp.bfloat16)] * 2  # arguments, not constants XLA would fold
    dot = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
    try:
        product = dot(*jax.device_put(operands, jax.devices("cpu")[0]))
        return product.dtype == jnp.float32 and bool(jnp.all(product == 36.0))
    except RuntimeError:  # jax.errors.JaxRuntimeError: this XLA has no such dot
        return False


def _isa_capped() -> bool:
    """XLA held to an ISA below AVX-512 (``--xla_cpu_max_isa``), where no bf16 instruction may run."""
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = flag.partition("=")
        if name == "--xla_cpu_max_isa":
            return not value.upper().startswith("AVX512")
    return False
