"""The JAX backend's model families are its folders: found, not listed, and the capabilities follow them."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("jax")

from benchbase_jax_ds2 import families
from benchbase_jax_ds2.backend import JaxBackend

from benchbase.errors import BenchbaseError

FOLDERS = ("toy", "shared_code", "copied")
"""The folders these tests add to the package's path."""


@pytest.fixture
def fresh_discovery(tmp_path, monkeypatch):
    """Discovery over the package's folders and ``tmp_path``'s, forgotten afterwards."""
    monkeypatch.setattr(families.benchbase_jax_ds2, "__path__", [*families.benchbase_jax_ds2.__path__,
                                                                 str(tmp_path)])
    families.discovered_families.cache_clear()
    yield tmp_path
    families.discovered_families.cache_clear()
    for name in FOLDERS:
        sys.modules.pop(f"benchbase_jax_ds2.{name}", None)
        if hasattr(families.benchbase_jax_ds2, name):
            delattr(families.benchbase_jax_ds2, name)


def test_the_families_are_the_folders_with_a_family_and_the_capabilities_follow_them():
    found = families.discovered_families()
    assert list(found) == ["conformer", "ds2", "rnnt"]
    capabilities = JaxBackend.capabilities
    assert capabilities.families == set(found)
    assert capabilities.precisions == {"fp32", "tf32", "bf16", "fp16", "int8-emulated"}
    assert capabilities.family_precisions == (("conformer", frozenset({"fp32", "tf32", "bf16", "fp16"})),)
    assert JaxBackend.description.endswith("Conformer (optax CTC), DS2 (optax CTC) and RNN-T (transducer loss), "
                                           "compiled with XLA")


def test_an_unknown_family_is_refused_in_one_line():
    with pytest.raises(BenchbaseError, match="no model family 'nope' \\(it has conformer, ds2, rnnt\\)") as error:
        families.family_named("nope")
    assert "\n" not in str(error.value)


def test_a_new_family_is_one_new_folder(fresh_discovery):
    folder = fresh_discovery / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text("class _Toy:\n    name = 'toy'\n    precisions = frozenset({'fp32'})\n\n"
                                        "FAMILY = _Toy()\n")
    (fresh_discovery / "shared_code").mkdir()
    (fresh_discovery / "shared_code" / "__init__.py").write_text("")  # a subpackage without FAMILY is no family
    found = families.discovered_families()
    assert list(found) == ["conformer", "ds2", "rnnt", "toy"] and families.family_named("toy").name == "toy"
    assert dict(families.narrower_precisions(found))["toy"] == {"fp32"}


def test_a_family_in_a_folder_of_another_name_is_refused(fresh_discovery):
    folder = fresh_discovery / "copied"
    folder.mkdir()
    (folder / "__init__.py").write_text("from benchbase_jax_ds2.ds2 import FAMILY\n")
    with pytest.raises(TypeError, match="copied/ defines the family 'ds2'"):
        families.discovered_families()
