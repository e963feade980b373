"""A backend's model families, found from its folders: what every backend plugin's discovery shares.

A backend package holds one subpackage per model family it implements, named after the family
(``ModelSpec.family``), whose ``__init__`` defines ``FAMILY``: the backend's implementation of
that family, an object (or a module) that meets the backend's own family protocol, with at least
a ``name``, the ``precisions`` it implements and a ``summary`` for the backend's description.
Adding a family to a backend is adding such a folder; nothing lists them. A backend calls
``discover`` once; its capabilities come from what is found (``all_precisions``,
``narrower_precisions``), and its ``build()`` picks one with ``for_model``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Generic, Protocol, TypeVar

from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec
from benchbase.specs.model import model_spec_class

__all__ = ["BackendFamilies", "BackendFamily", "discover", "protocol_members"]


class BackendFamily(Protocol):
    name: str
    precisions: frozenset[str]
    summary: str


Family = TypeVar("Family", bound=BackendFamily)


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The attributes and methods a ``typing.Protocol`` class (and the protocols it extends) names."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or not getattr(klass, "_is_protocol", False) or klass is Protocol:
            continue
        names.update(getattr(klass, "__annotations__", {}))
        names.update(name for name, value in vars(klass).items() if callable(value) and not name.startswith("_"))
    return tuple(sorted(names))


def discover(package: ModuleType, backend: str, protocol: type[Family]) -> BackendFamilies[Family]:
    """The families in ``package``'s folders, each checked against ``protocol`` (the backend's
    family protocol): a folder whose ``FAMILY`` lacks one of its members is a one-line
    ``BenchbaseError`` here, when the backend is loaded, not inside a run's ``build()``; one whose
    ``FAMILY`` is named otherwise is a ``TypeError`` (copied and not renamed, it would shadow the
    family it names)."""
    members = protocol_members(protocol)
    families: dict[str, Family] = {}
    for folder in pkgutil.iter_modules(package.__path__):
        if not folder.ispkg:
            continue
        family = getattr(importlib.import_module(f"{package.__name__}.{folder.name}"), "FAMILY", None)
        if family is None:
            continue  # a subpackage of shared code, not a family
        missing = [name for name in members if not hasattr(family, name)]
        if missing:
            raise BenchbaseError(f"{package.__name__}/{folder.name}/'s FAMILY lacks {', '.join(missing)} of the "
                                 f"{backend} backend's {protocol.__name__}")
        if family.name != folder.name:
            raise TypeError(f"{package.__name__}/{folder.name}/ defines the family {family.name!r}; "
                            f"a family's folder is named after it")
        families[family.name] = family
    return BackendFamilies(backend, dict(sorted(families.items())))


class BackendFamilies(Mapping[str, Family], Generic[Family]):
    """One backend's families by name, in name order, as ``discover`` found them."""

    def __init__(self, backend: str, families: Mapping[str, Family]) -> None:
        self.backend = backend
        self._families = dict(families)

    def __getitem__(self, name: str) -> Family:
        return self._families[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._families)

    def __len__(self) -> int:
        return len(self._families)

    def named(self, name: str) -> Family:
        """The family of ``ModelSpec.family`` ``name``; a one-line ``BenchbaseError`` for one the backend lacks."""
        if name not in self._families:
            raise BenchbaseError(f"the {self.backend} backend has no model family {name!r} "
                                 f"(it has {', '.join(self._families)})")
        return self._families[name]

    def for_model(self, spec: ModelSpec) -> Family:
        """The family that trains ``spec``, refusing in one line what the harness refuses before a run
        (``harness.devices.check_capabilities``) for a backend built without it (the kit's Python
        API, a test): a precision the family does not declare, a spec not of its family's class."""
        family = self.named(spec.family)
        if spec.precision not in family.precisions:
            raise BenchbaseError(f"the {self.backend} backend trains {family.name} in "
                                 f"{' or '.join(sorted(family.precisions))} only, not {spec.precision}")
        expected = model_spec_class(spec.family)
        if not isinstance(spec, expected):
            raise BenchbaseError(f"a {family.name} model needs a {expected.__name__}, not {type(spec).__name__}")
        return family

    def all_precisions(self) -> frozenset[str]:
        """Every precision some family implements (``Capabilities.precisions``)."""
        return frozenset().union(*(family.precisions for family in self.values()))

    def narrower_precisions(self) -> tuple[tuple[str, frozenset[str]], ...]:
        """(family, its precisions) for each family that implements fewer than ``all_precisions``
        (``Capabilities.family_precisions``)."""
        every = self.all_precisions()
        return tuple((name, family.precisions) for name, family in self.items() if family.precisions != every)

    def summaries(self) -> str:
        """The families as a backend's description names them: "DS2 (CTC), RNN-T (...) and ..."."""
        names = [family.summary for family in self.values()]
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
