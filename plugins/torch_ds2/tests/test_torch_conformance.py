"""The PyTorch backend passes benchbase's conformance kit: one test per rule, as any backend's own
suite runs it (benchbase.testing.BackendConformance)."""

from __future__ import annotations

import pytest

from benchbase.testing import BackendConformance

pytest.importorskip("benchbase_torch_ds2")



class TestTorchConformance(BackendConformance):
    backend = "torch"
