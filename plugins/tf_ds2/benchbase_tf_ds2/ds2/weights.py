"""The DS2 Keras model's variables by their names in benchbase's framework-neutral layout.

The neutral layout is Keras's own (kernels (inputs, outputs), the convolution (width, inputs,
outputs), LSTM gates i, f, c, o, one bias per gate), so no array is transposed here.
"""

from __future__ import annotations

from benchbase.families.ds2.weight_layout import BATCHNORM_PARTS
from benchbase_tf_ds2.ds2.model import DeepSpeech2

__all__ = ["neutral_variables"]

_BATCHNORM_VARIABLES = dict(zip(BATCHNORM_PARTS, ("gamma", "beta", "moving_mean", "moving_variance")))


def neutral_variables(model: DeepSpeech2) -> dict:
    """Each neutral name -> the Keras variable that holds it."""
    variables = {"conv.kernel": model.conv.kernel}
    variables |= _batchnorm("conv_norm", model.conv_norm)
    for layer, (lstm, norm) in enumerate(zip(model.lstms, model.lstm_norms)):
        variables[f"lstm.{layer}.input_kernel"] = lstm.cell.kernel
        variables[f"lstm.{layer}.recurrent_kernel"] = lstm.cell.recurrent_kernel
        variables[f"lstm.{layer}.bias"] = lstm.cell.bias
        variables |= _batchnorm(f"lstm_norm.{layer}", norm)
    variables["output.kernel"] = model.output_layer.kernel
    variables["output.bias"] = model.output_layer.bias
    # int8-emulated's activation ranges (none for any other precision).
    variables |= {f"{layer}.input_range": variable for layer, variable in model.input_ranges.items()}
    return variables


def _batchnorm(prefix: str, norm) -> dict:
    return {f"{prefix}.{part}": getattr(norm, attribute) for part, attribute in _BATCHNORM_VARIABLES.items()}
