"""The model families the TensorFlow backend implements, found from its folders.

A family is a subpackage of ``benchbase_tf_ds2`` whose ``__init__`` defines ``FAMILY`` (a
``family.ModelFamily``); the folder is named after the family (``ModelSpec.family``). Adding a
family to this backend is adding such a folder: nothing else lists them.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType

import benchbase_tf_ds2
from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec
from benchbase_tf_ds2.family import ModelFamily

__all__ = ["all_precisions", "discovered_families", "family_of", "narrower_precisions", "summaries"]


@functools.cache
def discovered_families() -> Mapping[str, ModelFamily]:
    """Each family's name -> its ``FAMILY``, in name order."""
    families: dict[str, ModelFamily] = {}
    for folder in pkgutil.iter_modules(benchbase_tf_ds2.__path__):
        if not folder.ispkg:
            continue
        family = getattr(importlib.import_module(f"{benchbase_tf_ds2.__name__}.{folder.name}"), "FAMILY", None)
        if family is None:
            continue  # a subpackage of shared code, not a family
        if family.name != folder.name:
            # The spec's family name finds the folder: a FAMILY copied from another folder and not
            # renamed would silently shadow that family.
            raise TypeError(f"benchbase_tf_ds2/{folder.name}/ defines the family {family.name!r}; "
                            f"a family's folder is named after it")
        families[family.name] = family
    return MappingProxyType(dict(sorted(families.items())))


def family_of(spec: ModelSpec) -> ModelFamily:
    """The family that trains ``spec``, which must be in one of the family's precisions."""
    families = discovered_families()
    family = families.get(spec.family)
    if family is None:
        raise BenchbaseError(f"the tf backend has no model family {spec.family!r} (it has {', '.join(families)})")
    if spec.precision not in family.precisions:
        raise BenchbaseError(f"the tf backend trains {family.name} in {' or '.join(sorted(family.precisions))} "
                             f"only, not {spec.precision}")
    return family


def all_precisions(families: Mapping[str, ModelFamily]) -> frozenset[str]:
    """Every precision some family implements (``Capabilities.precisions``)."""
    return frozenset().union(*(member.precisions for member in families.values()))


def narrower_precisions(families: Mapping[str, ModelFamily]) -> tuple[tuple[str, frozenset[str]], ...]:
    """(family, its precisions) for each family that implements fewer than ``all_precisions``
    (``Capabilities.family_precisions``)."""
    every = all_precisions(families)
    return tuple((name, member.precisions) for name, member in families.items() if member.precisions != every)


def summaries(families: Mapping[str, ModelFamily]) -> str:
    """The families as the backend's description names them: "DS2 (CTC) and RNN-T (transducer loss)"."""
    return " and ".join(member.summary for member in families.values())
