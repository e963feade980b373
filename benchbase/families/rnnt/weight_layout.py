"""benchbase's framework-neutral weight layout for the RNN-T model family.

Backends export and import their weights in this layout, so that benchbase's NumPy reference
(``benchbase.families.rnnt.reference``) and the harness's decoder run on the very same
weights. Every array is float32; the layout is Keras's (``x @ kernel + bias``), as the DS2
family's, and each backend transposes to its own:

    encoder.lstm.{i}.input_kernel       (inputs of layer i, 4 * encoder_units)   x @ input_kernel
    encoder.lstm.{i}.recurrent_kernel   (encoder_units, 4 * encoder_units)       h @ recurrent_kernel
    encoder.lstm.{i}.bias               (4 * encoder_units,)
        i = 0 .. encoder_pre_layers + encoder_post_layers - 1; layer 0's inputs are
        input_stack * feature_dimension, layer encoder_pre_layers's stack_time_factor * encoder_units
    prediction.embedding                (symbols, prediction_embedding)  row k embeds symbol k; the
                                        blank's row is the start-of-sequence input
    prediction.lstm.{i}.input_kernel    (prediction_embedding or prediction_units, 4 * prediction_units)
    prediction.lstm.{i}.recurrent_kernel (prediction_units, 4 * prediction_units)
    prediction.lstm.{i}.bias            (4 * prediction_units,)
    joint.encoder.kernel                (encoder_units, joint_units)
    joint.encoder.bias                  (joint_units,)
    joint.prediction.kernel             (prediction_units, joint_units)
    joint.prediction.bias               (joint_units,)
    joint.output.kernel                 (joint_units, symbols)
    joint.output.bias                   (symbols,)

Every LSTM's gates are in the order input, forget, cell candidate, output, each a block of
``units`` columns, with one bias per gate (PyTorch's two biases add up to it). There is no
BatchNorm (MLPerf's RNN-T has none). Both joint projections have a bias; their sum is what
the activation sees.

A model of precision ``int8-emulated`` also holds the moving-average range of each
fake-quantized layer input (``benchbase.families.rnnt.quantization``), float32 scalars:

    encoder.lstm.{i}.input_range, prediction.lstm.{i}.input_range,
    joint.{encoder,prediction,output}.input_range                        ()
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.families.layout import check_against_layout
from benchbase.families.rnnt.quantization import quantizer_state_layout
from benchbase.families.rnnt.spec import RNNTModelSpec

__all__ = ["encoder_layer_names", "prediction_layer_names", "validate_weights", "weight_layout"]


def weight_layout(model: RNNTModelSpec, feature_dimension: int) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape, in a fixed order (encoder, prediction network, joint)."""
    layout: dict[str, tuple[int, ...]] = {}
    units = model.encoder_units
    for layer, prefix in enumerate(encoder_layer_names(model)):
        if layer == 0:
            inputs = model.encoder_input_dimension(feature_dimension)
        elif layer == model.encoder_pre_layers:
            inputs = model.stack_time_factor * units
        else:
            inputs = units
        layout |= _lstm(prefix, inputs, units)
    layout["prediction.embedding"] = (model.symbols, model.prediction_embedding)
    inputs = model.prediction_embedding
    for prefix in prediction_layer_names(model):
        layout |= _lstm(prefix, inputs, model.prediction_units)
        inputs = model.prediction_units
    layout |= _dense("joint.encoder", units, model.joint_units)
    layout |= _dense("joint.prediction", model.prediction_units, model.joint_units)
    layout |= _dense("joint.output", model.joint_units, model.symbols)
    # Only a fake-quantized model (precision int8-emulated) keeps activation ranges.
    layout |= quantizer_state_layout(model)
    return layout


def encoder_layer_names(model: RNNTModelSpec) -> list[str]:
    """"encoder.lstm.0", ...: the pre-network's layers, then the post-network's."""
    return [f"encoder.lstm.{layer}" for layer in range(model.encoder_pre_layers + model.encoder_post_layers)]


def prediction_layer_names(model: RNNTModelSpec) -> list[str]:
    return [f"prediction.lstm.{layer}" for layer in range(model.prediction_layers)]


def _lstm(prefix: str, inputs: int, units: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.input_kernel": (inputs, 4 * units), f"{prefix}.recurrent_kernel": (units, 4 * units),
            f"{prefix}.bias": (4 * units,)}


def _dense(prefix: str, inputs: int, outputs: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.kernel": (inputs, outputs), f"{prefix}.bias": (outputs,)}


def validate_weights(weights: Mapping[str, np.ndarray], model: RNNTModelSpec, feature_dimension: int) -> None:
    """Raise ``BenchbaseError`` unless ``weights`` has exactly the layout's names and shapes.

    Backends call it first thing in ``import_weights``, so a wrong array never half-loads.
    """
    check_against_layout(weights, weight_layout(model, feature_dimension))
