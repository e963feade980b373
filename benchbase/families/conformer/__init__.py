"""The Conformer family (MLCommons AlgoPerf's LibriSpeech model): its spec, framework-neutral
weight layout, float64 NumPy reference with every mask, cost model and parts for the harness.

Importing the package defines ``ConformerModelSpec``, which registers ``family: conformer``.
"""

from __future__ import annotations

from benchbase.families.conformer.spec import ConformerModelSpec

__all__ = ["ConformerModelSpec"]
