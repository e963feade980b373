"""The model families the JAX backend implements, found from its folders.

A family is a subpackage of ``benchbase_jax_ds2`` whose ``__init__`` defines ``FAMILY`` (a
``family.ModelFamily``); the folder is named after the family (``ModelSpec.family``). Adding a
family to this backend is adding such a folder: nothing else lists them.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType

import benchbase_jax_ds2
from benchbase.errors import BenchbaseError
from benchbase_jax_ds2.family import ModelFamily

__all__ = ["all_precisions", "discovered_families", "family_named", "narrower_precisions"]


@functools.cache
def discovered_families() -> Mapping[str, ModelFamily]:
    """Each family's name -> its ``FAMILY``, in name order."""
    families: dict[str, ModelFamily] = {}
    for folder in pkgutil.iter_modules(benchbase_jax_ds2.__path__):
        if not folder.ispkg:
            continue
        family = getattr(importlib.import_module(f"{benchbase_jax_ds2.__name__}.{folder.name}"), "FAMILY", None)
        if family is None:
            continue  # a subpackage that is no family
        if family.name != folder.name:
            # The spec's family name finds the folder: a FAMILY copied from another folder and not
            # renamed would silently shadow that family.
            raise TypeError(f"benchbase_jax_ds2/{folder.name}/ defines the family {family.name!r}; "
                            f"a family's folder is named after it")
        families[family.name] = family
    return MappingProxyType(dict(sorted(families.items())))


def family_named(name: str) -> ModelFamily:
    """The family of ``ModelSpec.family`` ``name``."""
    families = discovered_families()
    if name not in families:
        raise BenchbaseError(f"the JAX backend has no model family {name!r} (it has {', '.join(families)})")
    return families[name]


def all_precisions(families: Mapping[str, ModelFamily]) -> frozenset[str]:
    """Every precision some family implements (``Capabilities.precisions``)."""
    return frozenset().union(*(known.precisions for known in families.values()))


def narrower_precisions(families: Mapping[str, ModelFamily]) -> tuple[tuple[str, frozenset[str]], ...]:
    """(family, its precisions) for each family that implements fewer than ``all_precisions``
    (``Capabilities.family_precisions``)."""
    every = all_precisions(families)
    return tuple((name, known.precisions) for name, known in families.items() if known.precisions != every)
