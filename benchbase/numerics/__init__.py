"""The numerics a score depends on: the error model and the references' rounded arithmetic.

``tolerances`` is the error model (how far one float32 computation may land from the float64
reference); ``rounded`` is the arithmetic every family's reference computes through, with the
model's rounding moves injected where a bound is wanted; ``quantization`` is int8-emulated's
shared fake-quantization scheme, which every family with int8-emulated computes its quantized
reference with. It knows no model family: the families
(``benchbase.families``, whose ``agreement`` compares a backend's predictions with what its
exported weights compute) and the conformance kit (``benchbase.kit``) build on it.
"""
