"""Registers the TensorFlow backend with benchbase."""

from __future__ import annotations

from benchbase import hookimpl
from benchbase.backend import BackendReference


@hookimpl
def register_backends(register):
    # A reference, not the class: tensorflow is imported only when a run asks for this backend.
    register(BackendReference(
        name="tf",
        target="benchbase_tf_ds2.backend:TensorFlowBackend",
        description="TensorFlow 2 / Keras 3: the Conformer (CTC), DS2 (CTC) and RNN-T (transducer loss), "
                    "tf.distribute",
    ))
