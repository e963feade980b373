"""The error model's elementwise term covers what the frameworks' vector functions do on this CPU.

``ELEMENTWISE_ULPS`` is rule 3 of the error model (benchbase.numerics.tolerances): each exp, log,
sigmoid or tanh is off by at most that many u, relative. benchmarks/elementwise_ulps.py measures
each framework's functions against float64 on a sweep of their working range, standalone and
inside the LSTM kernels the backends train with (ATen's or oneDNN's nn.LSTM, TensorFlow's
BlockLSTMV2); here every one must lie within the term. `make test-isa` runs this again under the
next lower ISA, whose kernels are other approximations (oneDNN's SSE4.1 LSTM sigmoid is the
largest measured: docs/BENCHMARKS.md, "What a vector function costs, measured").
"""

from __future__ import annotations

import pytest
from benchmark_scripts import load_benchmark

from benchbase.numerics.tolerances import ELEMENTWISE_ULPS

pytestmark = pytest.mark.numerics


@pytest.fixture(scope="module")
def probe():
    return load_benchmark("elementwise_ulps")


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
def test_every_vector_function_of_a_framework_is_within_the_models_elementwise_term(probe, framework):
    pytest.importorskip({"tf": "tensorflow"}.get(framework, framework))
    measured = probe.FRAMEWORKS[framework]("cpu")
    assert {name for name in measured if "LSTM" in name} or framework == "jax"  # the backends' own kernels
    beyond = {name: result for name, result in measured.items() if not result["max"] <= ELEMENTWISE_ULPS}
    assert not beyond, f"relative errors over {ELEMENTWISE_ULPS} u: {beyond}"


def test_the_probe_finds_an_error_that_is_there(probe):
    """A float32 function that rounds its result to bfloat16 is off by up to 2^-9 relative, 2^15 u."""
    import numpy as np

    x = probe.sweeps()["tanh"]
    truncated = (np.tanh(x).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    assert probe.roundings("tanh", x, truncated)["max"] > 1000 * ELEMENTWISE_ULPS
    assert probe.roundings("tanh", x, np.tanh(x.astype(np.float64)).astype(np.float32))["max"] <= 1
