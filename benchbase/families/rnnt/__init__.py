"""The RNN-T family (MLPerf Training's speech reference architecture): its spec, its
framework-neutral weight layout, and the NumPy reference of its forward pass, transducer loss
and greedy search.

Importing the package defines ``RNNTModelSpec``, which registers ``family: rnnt``.
"""

from __future__ import annotations

from benchbase.families.rnnt.spec import RNNTModelSpec

__all__ = ["RNNTModelSpec"]
