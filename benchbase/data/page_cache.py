"""Dropping a feature store from the operating system's page cache (MLPerf's cache_clear).

A store read by the previous run sits in memory, so a second run's first epoch would read no
disk at all. ``posix_fadvise(POSIX_FADV_DONTNEED)`` asks the kernel to drop a file's clean
cached pages; it needs no privileges (unlike writing to /proc/sys/vm/drop_caches) and touches
only the store. The kernel may keep pages that other processes have mapped, so the answer
is "asked for every file", not a guarantee.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["drop_from_page_cache"]


def drop_from_page_cache(root: Path) -> bool:
    """Ask the OS to evict every file under ``root``; False where it cannot (no posix_fadvise, or a file refused)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False  # macOS and Windows have no such call
    try:
        files = [path for path in Path(root).rglob("*") if path.is_file()]
    except OSError:
        return False
    for path in files:
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        try:
            advise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            return False
        finally:
            os.close(descriptor)
    return True
