"""The JAX backend passes benchbase's conformance kit: one test per rule, as any backend's own
suite runs it (benchbase.testing.BackendConformance)."""

from __future__ import annotations

import pytest

from benchbase.testing import BackendConformance

pytest.importorskip("benchbase_jax_ds2")

# slow: every build compiles the backend's programs, and the rules that build several backends
# take 10 to 30 s each on two cores. The rules that hold floats to the error model's bounds are
# marked numerics by BackendConformance: `make test-isa` runs those again under a lower CPU ISA.
pytestmark = pytest.mark.slow


class TestJaxConformance(BackendConformance):
    backend = "jax"
