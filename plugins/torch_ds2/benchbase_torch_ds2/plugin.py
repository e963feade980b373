"""Registers the PyTorch backend with benchbase."""

from __future__ import annotations

from benchbase import hookimpl


@hookimpl
def register_backends(register):
    from benchbase_torch_ds2.backend import TorchBackend  # torch is imported only when asked for

    register(TorchBackend)
