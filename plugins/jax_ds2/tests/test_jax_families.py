"""The JAX backend's model families are its folders: found, not listed, and the capabilities follow them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

import benchbase_jax_ds2
from benchbase_jax_ds2.backend import FAMILIES, JaxBackend
from benchbase_jax_ds2.family import ModelFamily

from benchbase.errors import BenchbaseError
from benchbase.families.folders import discover
from benchbase.specs.model import model_families

FOLDERS = ("toy", "shared_code", "copied")
"""The folders these tests add to the package's path."""


@pytest.fixture
def fresh_discovery(tmp_path, monkeypatch):
    """Discovery over the package's folders and ``tmp_path``'s, forgotten afterwards."""
    monkeypatch.setattr(benchbase_jax_ds2, "__path__", [*benchbase_jax_ds2.__path__,
                                                                 str(tmp_path)])
    yield tmp_path
    for name in FOLDERS:
        sys.modules.pop(f"benchbase_jax_ds2.{name}", None)
        if hasattr(benchbase_jax_ds2, name):
            delattr(benchbase_jax_ds2, name)


def test_the_families_are_the_folders_with_a_family_and_the_capabilities_follow_them():
    found = FAMILIES
    package = Path(benchbase_jax_ds2.__file__).parent
    assert list(found) == [name for name in model_families() if (package / name / "__init__.py").is_file()]
    capabilities = JaxBackend.capabilities
    assert capabilities.families == set(found)
    assert capabilities.precisions == {"fp32", "tf32", "bf16", "fp16", "int8-emulated"}
    assert capabilities.family_precisions == found.narrower_precisions()
    assert dict(capabilities.family_precisions)["conformer"] == {"fp32", "tf32", "bf16", "fp16"}
    assert JaxBackend.description.endswith(f"{found.summaries()}, compiled with XLA")


def test_an_unknown_family_is_refused_in_one_line():
    known = ", ".join(FAMILIES)
    with pytest.raises(BenchbaseError, match=re.escape(f"no model family 'nope' (it has {known})")) as error:
        FAMILIES.named("nope")
    assert "\n" not in str(error.value)


def test_a_new_family_is_one_new_folder(fresh_discovery):
    own = list(FAMILIES)
    folder = fresh_discovery / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text("from types import SimpleNamespace\n\n"
                                        "from benchbase_jax_ds2.ds2 import family\n\n"
                                        "FAMILY = SimpleNamespace(**{**vars(family), 'name': 'toy', "
                                        "'precisions': frozenset({'fp32'})})\n")
    (fresh_discovery / "shared_code").mkdir()
    (fresh_discovery / "shared_code" / "__init__.py").write_text("")  # a subpackage without FAMILY is no family
    found = discover(benchbase_jax_ds2, "JAX", ModelFamily)
    assert list(found) == sorted([*own, "toy"])
    assert found.named("toy").name == "toy"
    assert dict(found.narrower_precisions())["toy"] == {"fp32"}


def test_a_family_in_a_folder_of_another_name_is_refused(fresh_discovery):
    folder = fresh_discovery / "copied"
    folder.mkdir()
    (folder / "__init__.py").write_text("from benchbase_jax_ds2.ds2 import FAMILY\n")
    with pytest.raises(TypeError, match="copied/ defines the family 'ds2'"):
        discover(benchbase_jax_ds2, "JAX", ModelFamily)
