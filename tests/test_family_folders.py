"""A backend's families are found from its folders (``benchbase.families.folders``), each checked
against the backend's family protocol when it is found, not inside a run's ``build()``."""

from __future__ import annotations

import importlib
import sys
from typing import Protocol

import pytest

from benchbase.errors import BenchbaseError
from benchbase.families.folders import discover, protocol_members

PACKAGE = "benchbase_test_folders_backend"


class ToyFamily(Protocol):
    name: str
    summary: str
    precisions: frozenset[str]

    def build_network(self, spec: object) -> object:
        """The family's network."""
        ...


def _package(tmp_path, monkeypatch, families: dict[str, str]):
    """A backend package in ``tmp_path`` with one folder per family, each ``__init__`` as given."""
    root = tmp_path / PACKAGE
    root.mkdir()
    (root / "__init__.py").write_text("")
    for folder, source in families.items():
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module(PACKAGE)


def _family(name: str, members: str = "    def build_network(self, spec):\n        return spec\n") -> str:
    return (f"class Family:\n    name = {name!r}\n    summary = {name.upper()!r}\n"
            f"    precisions = frozenset({{'fp32'}})\n{members}\n\nFAMILY = Family()\n")


def test_the_protocol_members_are_its_attributes_and_methods():
    assert protocol_members(ToyFamily) == ("build_network", "name", "precisions", "summary")


def test_the_families_are_the_folders_with_a_family(tmp_path, monkeypatch):
    package = _package(tmp_path, monkeypatch, {"b": _family("b"), "a": _family("a"), "shared": ""})
    found = discover(package, "toy", ToyFamily)
    assert list(found) == ["a", "b"] and found.named("a") is found["a"]
    assert found.summaries() == "A and B" and found.all_precisions() == {"fp32"}


def test_a_family_missing_a_protocol_member_is_refused_when_found(tmp_path, monkeypatch):
    package = _package(tmp_path, monkeypatch, {"a": _family("a", members="    pass\n")})
    with pytest.raises(BenchbaseError, match="a/'s FAMILY lacks build_network of the toy backend's ToyFamily") as error:
        discover(package, "toy", ToyFamily)
    assert "\n" not in str(error.value)


def test_an_unknown_family_is_a_one_line_error(tmp_path, monkeypatch):
    found = discover(_package(tmp_path, monkeypatch, {"a": _family("a")}), "toy", ToyFamily)
    with pytest.raises(BenchbaseError, match="the toy backend has no model family 'w2v' \\(it has a\\)"):
        found.named("w2v")
