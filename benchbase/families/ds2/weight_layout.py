"""benchbase's framework-neutral weight layout for the DS2 model family.

Backends export and import their weights in this layout (``Backend.export_weights`` and
``import_weights``), so the conformance kit can run any backend and benchbase's NumPy
reference on the very same weights. Every array is float32; the layout is Keras's, the
most common on-disk convention, and each backend transposes to its own:

    conv.kernel                  (conv_width, feature_dimension, conv_channels)
                                 output[t, c] = sum_k,f input[t * stride + k, f] * kernel[k, f, c]
    conv_norm.{scale,offset,mean,variance}             (conv_channels,)
    lstm.{i}.input_kernel        (inputs of layer i, 4 * lstm_units)  x @ input_kernel
    lstm.{i}.recurrent_kernel    (lstm_units, 4 * lstm_units)         h @ recurrent_kernel
    lstm.{i}.bias                (4 * lstm_units,)   one bias per gate
                                 gates in the order input, forget, cell candidate, output
    lstm_norm.{i}.{scale,offset,mean,variance}          (lstm_units,)
    output.kernel                (lstm_units, symbols)
    output.bias                  (symbols,)

BatchNorm's ``mean`` and ``variance`` are its running statistics (used in inference).
The convolution has no bias: BatchNorm follows it.

A model of precision ``int8-emulated`` also holds the moving-average range of each
fake-quantized layer input (``benchbase.families.ds2.quantization``), state like BatchNorm's statistics:

    conv.input_range, lstm.{i}.input_range, output.input_range      ()   float32 scalars

"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.families.ds2.quantization import quantizer_state_layout
from benchbase.families.ds2.spec import DS2ModelSpec as ModelSpec
from benchbase.families.layout import check_against_layout

__all__ = ["BATCHNORM_PARTS", "validate_weights", "weight_layout"]

BATCHNORM_PARTS = ("scale", "offset", "mean", "variance")


def weight_layout(model: ModelSpec, feature_dimension: int) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape, in a fixed order."""
    layout: dict[str, tuple[int, ...]] = {
        "conv.kernel": (model.conv_width, feature_dimension, model.conv_channels),
    }
    layout |= _batchnorm("conv_norm", model.conv_channels)
    inputs = model.conv_channels
    for layer in range(model.lstm_layers):
        gates = 4 * model.lstm_units
        layout[f"lstm.{layer}.input_kernel"] = (inputs, gates)
        layout[f"lstm.{layer}.recurrent_kernel"] = (model.lstm_units, gates)
        layout[f"lstm.{layer}.bias"] = (gates,)
        layout |= _batchnorm(f"lstm_norm.{layer}", model.lstm_units)
        inputs = model.lstm_units
    layout["output.kernel"] = (model.lstm_units, model.symbols)
    layout["output.bias"] = (model.symbols,)
    # Only a fake-quantized model (precision int8-emulated) keeps activation ranges: the
    # layout of every other precision, and so every fp32-only backend, is unchanged.
    layout |= quantizer_state_layout(model)
    return layout


def _batchnorm(prefix: str, channels: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{part}": (channels,) for part in BATCHNORM_PARTS}


def validate_weights(weights: Mapping[str, np.ndarray], model: ModelSpec, feature_dimension: int) -> None:
    """Raise ``BenchbaseError`` unless ``weights`` has exactly the layout's names and shapes.

    Backends call it first thing in ``import_weights``, so a wrong array never half-loads.
    """
    check_against_layout(weights, weight_layout(model, feature_dimension))
