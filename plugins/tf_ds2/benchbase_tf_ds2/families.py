"""The model families the TensorFlow backend implements, found from its folders.

A family is a subpackage of ``benchbase_tf_ds2`` whose ``__init__`` defines ``FAMILY`` (a
``family.ModelFamily``); the folder is named after the family (``ModelSpec.family``). Adding a
family to this backend is adding such a folder: nothing else lists them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import benchbase_tf_ds2
from benchbase.errors import BenchbaseError
from benchbase.families import folders
from benchbase.specs import ModelSpec
from benchbase_tf_ds2.family import ModelFamily

__all__ = ["all_precisions", "discovered_families", "family_of", "narrower_precisions", "summaries"]

all_precisions = folders.all_precisions
narrower_precisions = folders.narrower_precisions
summaries = folders.summaries


@functools.cache
def discovered_families() -> Mapping[str, ModelFamily]:
    """Each family's name -> its ``FAMILY``, in name order (``benchbase.families.folders.find``)."""
    return folders.find(benchbase_tf_ds2)


def family_of(spec: ModelSpec) -> ModelFamily:
    """The family that trains ``spec``, which must be in one of the family's precisions."""
    family = folders.named(discovered_families(), spec.family, "tf")
    if spec.precision not in family.precisions:
        raise BenchbaseError(f"the tf backend trains {family.name} in {' or '.join(sorted(family.precisions))} "
                             f"only, not {spec.precision}")
    return family
