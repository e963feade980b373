"""Files benchbase writes get the umask's permissions: a shared results folder must be readable."""

from __future__ import annotations

import os
import stat

import pytest

from benchbase.atomic import atomic_write_bytes, atomic_write_text, current_umask


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    before = os.umask(0o022)
    yield set_mask
    os.umask(before)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_an_atomic_write_has_the_mode_a_plain_open_would_give(tmp_path, umask, mask, mode):
    umask(mask)
    assert current_umask() == mask
    atomic_write_text(tmp_path / "result.json", "{}")
    atomic_write_bytes(tmp_path / "figure.png", lambda handle: handle.write(b"\x89PNG"))
    plain = tmp_path / "plain.txt"
    plain.write_text("")
    for name in ("result.json", "figure.png", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_a_rewrite_keeps_nothing_of_the_temporary_file(tmp_path, umask):
    umask(0o022)
    atomic_write_text(tmp_path / "config.json", "old")
    atomic_write_text(tmp_path / "config.json", "new")
    assert [path.name for path in tmp_path.iterdir()] == ["config.json"]
    assert (tmp_path / "config.json").read_text() == "new"
