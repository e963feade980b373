"""What an optimizer step must do to the weights, computed without any backend's framework.

``reference``: a float64 NumPy implementation of every optimizer the spec language has
(``benchbase.specs.optimizer``), its schedule and its gradient clipping, and the ways a backend
commonly differs from it (a framework's default, a decay coupled, the schedule a step off), so
that a mismatch can be named. ``probe``: how the gradient a backend applies is read off one
step of a plain optimizer. The conformance kit's ``optimizer_update`` rule builds on both.
"""

from __future__ import annotations

from benchbase.optimizers.probe import GradientProbe, probe_optimizer, trainable_names
from benchbase.optimizers.reference import Deviation, ReferenceOptimizer, deviations

__all__ = ["Deviation", "GradientProbe", "ReferenceOptimizer", "deviations", "probe_optimizer", "trainable_names"]
