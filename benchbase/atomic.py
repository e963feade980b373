"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write_bytes", "atomic_write_text", "current_umask", "naming_the_file"]


def atomic_write_bytes(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, fsync, then rename into place.

    The file gets the permissions a plain ``open()`` would give it (0666 less the umask):
    mkstemp creates its file 0600, which a shared results folder or a web server cannot read.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(descriptor, 0o666 & ~current_umask())
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        # The previous complete file (if any) stays in place: only the temporary one goes.
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:
            raise naming_the_file(error, path) from error
        raise


def naming_the_file(error: OSError, path: object) -> OSError:
    """``error`` naming ``path`` where it names no file of its own: a write to an open file (a full
    disk) raises an OSError without one, and its one-line message must say which file it was."""
    return OSError(error.errno, error.strerror, error.filename if error.filename is not None else str(path))


def current_umask() -> int:
    """The process's umask: from /proc where Linux shows it, else by setting it and back (which
    another thread creating a file at that instant would see)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))
