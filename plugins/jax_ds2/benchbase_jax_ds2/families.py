"""The model families the JAX backend implements, found from its folders.

A family is a subpackage of ``benchbase_jax_ds2`` whose ``__init__`` defines ``FAMILY`` (a
``family.ModelFamily``); the folder is named after the family (``ModelSpec.family``). Adding a
family to this backend is adding such a folder: nothing else lists them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import benchbase_jax_ds2
from benchbase.families import folders
from benchbase_jax_ds2.family import ModelFamily

__all__ = ["all_precisions", "discovered_families", "family_named", "narrower_precisions", "summaries"]

all_precisions = folders.all_precisions
narrower_precisions = folders.narrower_precisions
summaries = folders.summaries


@functools.cache
def discovered_families() -> Mapping[str, ModelFamily]:
    """Each family's name -> its ``FAMILY``, in name order (``benchbase.families.folders.find``)."""
    return folders.find(benchbase_jax_ds2)


def family_named(name: str) -> ModelFamily:
    """The family of ``ModelSpec.family`` ``name``."""
    return folders.named(discovered_families(), name, "JAX")
