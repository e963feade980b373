"""Loading a backend without its framework's C++ start-up chatter on the terminal.

TensorFlow 2.21 writes absl's "All log messages before absl::InitializeLog() is called ..."
and an INFO line about oneDNN while it is imported, once per copy of absl it loads (twice), and
TF_CPP_MIN_LOG_LEVEL does not reach messages logged before absl is initialized. So the CLI
routes file descriptor 2 into a file while a backend's module is imported and writes back every
line but those: warnings, errors and Python's own output still reach the terminal, and an
exception raised by the import propagates as it would have.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from benchbase.backend import Backend
from benchbase.plugin_host.registry import Registry

__all__ = ["NATIVE_NOISE", "filtered_native_logs", "load_backend"]

NATIVE_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    # glog/absl's INFO lines: "I0000 00:00:1795602290.142008    8734 port.cc:153] ..."
    r"|I\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w./-]+:\d+\] "
)
"""A C++ logger's INFO lines and absl's notice that it is not initialized: what the CLI drops."""


def load_backend(registry: Registry, name: str) -> type[Backend]:
    """``registry.backend(name)``, its framework imported without the C++ INFO lines."""
    with filtered_native_logs():
        return registry.backend(name)


@contextmanager
def filtered_native_logs() -> Iterator[None]:
    """Everything written to file descriptor 2 inside, but NATIVE_NOISE's lines, written after."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            _write_kept(captured.read().decode("utf-8", errors="replace"))


def _write_kept(text: str) -> None:
    kept = [line for line in text.splitlines(keepends=True) if not NATIVE_NOISE.match(line.rstrip("\n"))]
    if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()
