"""The TensorFlow backend passes benchbase's conformance kit: one test per rule, as any backend's
own suite runs it (benchbase.testing.BackendConformance)."""

from __future__ import annotations

import pytest

from benchbase.testing import BackendConformance

pytest.importorskip("tensorflow")  # from the plugin's cpu or gpu extra
pytest.importorskip("benchbase_tf_ds2")



class TestTensorFlowConformance(BackendConformance):
    backend = "tf"
    # Every Conformer build traces and compiles its attention blocks anew: its rules take 20 to 60 s
    # each on two cores (ds2's and rnnt's under 20).
    slow = ("conformer",)
