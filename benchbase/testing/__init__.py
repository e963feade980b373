"""Test tooling: the conformance kit as pytest tests, and running tests under a lower CPU ISA.

    from benchbase.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend = "mine"                          # a registered name, or: backend_class = MyBackend

``benchbase.testing.isa`` runs a command with the frameworks held one instruction set below
this CPU's (``make test-isa``). The kit itself is ``benchbase.kit``; nothing under benchbase/
outside this package imports it.
"""

from __future__ import annotations

__all__ = ["BackendConformance"]


def __getattr__(name: str):
    # pytest is a test dependency, not a runtime one: only the pytest base class imports it.
    if name == "BackendConformance":
        from benchbase.testing.pytest_support import BackendConformance

        return BackendConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
