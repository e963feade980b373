"""A backend's model families, found from its folders: what every backend plugin's discovery shares.

A backend package holds one subpackage per model family it implements, named after the family
(``ModelSpec.family``), whose ``__init__`` defines ``FAMILY``: the backend's implementation of
that family, whatever the backend's own protocol for it is, with at least a ``name``, the
``precisions`` it implements and a ``summary`` for the backend's description. Adding a family to
a backend is adding such a folder; nothing lists them. The backend's capabilities come from what
is found (``all_precisions``, ``narrower_precisions``), and its ``build()`` picks one with ``named``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Protocol

from benchbase.errors import BenchbaseError

__all__ = ["BackendFamily", "all_precisions", "find", "named", "narrower_precisions", "summaries"]


class BackendFamily(Protocol):
    name: str
    precisions: frozenset[str]
    summary: str


def find(package: ModuleType) -> Mapping[str, BackendFamily]:
    """Each family's name -> its ``FAMILY``, in name order; a folder whose ``FAMILY`` is named
    otherwise is a ``TypeError`` (copied and not renamed, it would shadow the family it names)."""
    families: dict[str, BackendFamily] = {}
    for folder in pkgutil.iter_modules(package.__path__):
        if not folder.ispkg:
            continue
        family = getattr(importlib.import_module(f"{package.__name__}.{folder.name}"), "FAMILY", None)
        if family is None:
            continue  # a subpackage of shared code, not a family
        if family.name != folder.name:
            raise TypeError(f"{package.__name__}/{folder.name}/ defines the family {family.name!r}; "
                            f"a family's folder is named after it")
        families[family.name] = family
    return MappingProxyType(dict(sorted(families.items())))


def named(families: Mapping[str, BackendFamily], name: str, backend: str) -> BackendFamily:
    """The family of ``ModelSpec.family`` ``name``; a one-line ``BenchbaseError`` for one ``backend`` lacks."""
    if name not in families:
        raise BenchbaseError(f"the {backend} backend has no model family {name!r} (it has {', '.join(families)})")
    return families[name]


def all_precisions(families: Mapping[str, BackendFamily]) -> frozenset[str]:
    """Every precision some family implements (``Capabilities.precisions``)."""
    return frozenset().union(*(family.precisions for family in families.values()))


def narrower_precisions(families: Mapping[str, BackendFamily]) -> tuple[tuple[str, frozenset[str]], ...]:
    """(family, its precisions) for each family that implements fewer than ``all_precisions``
    (``Capabilities.family_precisions``)."""
    every = all_precisions(families)
    return tuple((name, family.precisions) for name, family in families.items() if family.precisions != every)


def summaries(families: Mapping[str, BackendFamily]) -> str:
    """The families as a backend's description names them: "DS2 (CTC), RNN-T (...) and ..."."""
    names = [family.summary for family in families.values()]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
