"""Registers the TensorFlow backend with benchbase."""

from __future__ import annotations

from benchbase import hookimpl


@hookimpl
def register_backends(register):
    from benchbase_tf_ds2.backend import TensorFlowBackend  # tensorflow is imported only when asked for

    register(TensorFlowBackend)
