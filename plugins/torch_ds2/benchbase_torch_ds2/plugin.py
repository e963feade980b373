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
        description="PyTorch: the model families in its folders, cuDNN or oneDNN kernels, DDP and its strategies",
    ))
