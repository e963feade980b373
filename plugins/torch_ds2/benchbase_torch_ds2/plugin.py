"""Registers the PyTorch backend with benchbase."""

from __future__ import annotations

from benchbase import hookimpl
from benchbase.backend import BackendReference


@hookimpl
def register_backends(register):
    # A reference, not the class: torch is imported only when a run asks for this backend.
    register(BackendReference(
        name="torch",
        target="benchbase_torch_ds2.backend:TorchBackend",
        description="PyTorch: DS2 (CTC, AdaDelta) and RNN-T (transducer loss, AdamW) with oneDNN or cuDNN LSTMs",
    ))
