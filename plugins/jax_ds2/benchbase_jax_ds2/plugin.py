"""Registers the JAX backend with benchbase."""

from __future__ import annotations

from benchbase import hookimpl
from benchbase.backend import BackendReference


@hookimpl
def register_backends(register):
    # A reference, not the class: jax is imported only when a run asks for this backend.
    register(BackendReference(
        name="jax",
        target="benchbase_jax_ds2.backend:JaxBackend",
        description="JAX: the model families in its folders, compiled with XLA, scanned LSTMs, AdaDelta and AdamW",
    ))
