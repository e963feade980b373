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
        description="JAX: DS2 compiled with XLA, scanned LSTMs, optax CTC and AdaDelta",
    ))
