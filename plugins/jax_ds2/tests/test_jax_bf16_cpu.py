"""bf16 on a CPU with bf16 dot units: YNNPACK's native bf16 x bf16 -> f32 dots, in the form XLA
can run (XLA's own dot kernel fails on bf16 x bf16 -> f32 in any other form)."""

from __future__ import annotations

import numpy as np
import pytest


def test_jax_bf16_dots_on_this_cpu_are_native_where_the_cpu_has_bf16_units_and_equal_the_rounded_ones():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from benchbase_jax_ds2.arithmetic import HIGHEST, Arithmetic
    from benchbase_jax_ds2.cpu_bf16 import native_bf16_dots

    from benchbase.telemetry.cpu_features import cpu_flags

    if "avx512_bf16" not in cpu_flags():
        pytest.skip("no AVX-512 BF16: bf16 rounds its operands and multiplies in float32")
    assert native_bf16_dots()
    native, rounded = Arithmetic(jnp.bfloat16, HIGHEST, ordered=True), Arithmetic(jnp.bfloat16, HIGHEST, rounded=True)
    rng = np.random.default_rng(0)
    # ds2-mini's sizes: at these XLA's simplifier turns the transposed result into swapped operands
    # (its own dot kernel then fails: "BF16 x BF16 = F32"), which small shapes do not show.
    shapes = {"bti,ig->tbg": ((32, 50, 96), (96, 384)), "bu,ug->bg": ((4, 10), (10, 40)),
              "bg,ug->bu": ((4, 40), (10, 40)), "tbu,tbg->ug": ((13, 4, 10), (13, 4, 40)),
              "btu,us->bts": ((4, 13, 10), (10, 7))}
    for subscripts, (left, right) in shapes.items():
        x, y = (jnp.asarray(rng.normal(size=shape).astype(np.float32)) for shape in (left, right))
        # forward and both gradients compile and run (the transposed result is the form XLA's own kernel
        # cannot run), and equal the rounded products' to float32 summation order
        def loss(x, y, math, subscripts=subscripts):
            return jnp.sum(math.dot(subscripts, x, y) ** 2)
        values = [jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)(x, y, math)
                  for math in (native, rounded)]
        for a, b in zip(jax.tree_util.tree_leaves(values[0]), jax.tree_util.tree_leaves(values[1])):
            a, b = np.asarray(a), np.asarray(b)
            # float32 sums in another order; the input gradients are rounded to bf16 (the operand's type)
            np.testing.assert_allclose(a, b, rtol=2.0**-7, atol=1e-5 * np.abs(b).max())
