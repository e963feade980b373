"""The numerics a score depends on: the error model, the references' rounded arithmetic, agreement.

``tolerances`` is the error model (how far one float32 computation may land from the float64
reference); ``rounded`` is the arithmetic every family's reference computes through, with the
model's rounding moves injected where a bound is wanted; ``agreement`` compares what a backend
predicted with what its exported weights compute (independent scoring, ``benchbase verify``).
The harness imports this package; the conformance kit (``benchbase.kit``) builds on it too.
"""
