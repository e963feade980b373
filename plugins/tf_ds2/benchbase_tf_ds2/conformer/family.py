"""The TensorFlow backend's Conformer family: AlgoPerf's LibriSpeech Conformer, trained on CTC.

``predict()`` returns its per-frame log-probabilities (batch, output frames, symbols), float32;
the harness decodes them. Unlike DS2's, the model needs each utterance's length, in training and
in inference: its attention must not read the padded frames, nor its BatchNorm average over them.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import tensorflow as tf

from benchbase.backend import BuildContext, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.conformer import weight_layout
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.telemetry.cpu_features import cpu_flags
from benchbase_tf_ds2 import ctc
from benchbase_tf_ds2.conformer import weights
from benchbase_tf_ds2.conformer.model import Conformer
from benchbase_tf_ds2.family import Infer

__all__ = ["ConformerFamily"]


class ConformerFamily:
    name = "conformer"
    summary = "Conformer (CTC)"
    # bf16 and fp16 are Keras's mixed precision (family.keras_policy; fp16's loss scaling is
    # the backend's); the spec has no int8-emulated tensors.
    precisions = frozenset({"fp32", "tf32", "bf16", "fp16"})
    layout = weight_layout

    def build_model(self, context: BuildContext, fused_lstm: bool | None) -> Conformer:
        spec = context.model  # no LSTM: fused_lstm does not apply
        if spec.precision == "bf16" and context.plan.kind == "cpu" and not cpu_has_bfloat16_units():
            raise BenchbaseError("the tf backend trains conformer in bf16 on a CPU only where oneDNN has bfloat16 "
                                 "kernels (AVX-512 BF16 or AMX): on this CPU its convolutions abort the process; "
                                 "use fp32")
        return Conformer(spec, context.feature_dimension)

    def utterance_losses(self, model: Conformer, features: tf.Tensor, feature_lengths: tf.Tensor,
                         output_lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
        # DS2's CTC, as the spec pins it for both families (per utterance, an impossible alignment
        # zero), on this model called with the lengths its masks need.
        forward = functools.partial(model, feature_lengths=feature_lengths)
        return ctc.utterance_losses(forward, model.spec, features, output_lengths, labels, label_lengths)

    def forward(self, model: Conformer, features: tf.Tensor, feature_lengths: tf.Tensor) -> tf.Tensor:
        return model(features, feature_lengths, training=False)

    def predict(self, infer: Infer, spec: ConformerModelSpec, inputs: Inputs) -> np.ndarray:
        return np.asarray(infer(inputs.features, inputs.feature_lengths).numpy(), dtype=np.float32)

    def neutral_variables(self, model: Conformer) -> dict[str, tf.Variable]:
        return weights.neutral_variables(model)


def cpu_has_bfloat16_units() -> bool:
    """Whether oneDNN runs bfloat16 convolutions here: the CPU has AVX-512 BF16 or AMX and oneDNN is
    not held below AVX-512 (``ONEDNN_MAX_CPU_ISA``, as ``make test-isa`` holds it). Without them it
    refuses the primitive, or aborts the process (seen under the AVX2 cap)."""
    held = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags()) and held.startswith(("ALL", "AVX512", "AVX10", "AMX"))
