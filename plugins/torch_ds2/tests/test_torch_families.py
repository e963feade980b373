"""The torch backend's model families: each a folder with a ``FAMILY``, found without a list."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import benchbase_torch_ds2
import pytest
from benchbase_torch_ds2.backend import FAMILIES, TorchBackend
from benchbase_torch_ds2.family import ModelFamily

from benchbase.errors import BenchbaseError
from benchbase.families.folders import BackendFamilies, discover
from benchbase.specs.model import model_families

PACKAGE = Path(benchbase_torch_ds2.__file__).parent


def test_the_folders_are_the_families_and_give_the_capabilities():
    found = FAMILIES
    assert list(found) == [name for name in model_families() if (PACKAGE / name / "__init__.py").is_file()]
    capabilities = TorchBackend.capabilities
    assert capabilities.families == set(found)
    assert capabilities.precisions == {"fp32", "tf32", "bf16", "fp16", "int8-emulated"}
    assert capabilities.family_precisions == found.narrower_precisions()
    assert dict(capabilities.family_precisions)["conformer"] == {"fp32", "tf32", "bf16", "fp16"}
    assert found.summaries() in TorchBackend.description


def test_an_unknown_family_is_a_one_line_error():
    with pytest.raises(BenchbaseError, match="no model family 'w2v'") as raised:
        FAMILIES.named("w2v")
    assert "\n" not in str(raised.value)


def _write_family(root: Path, folder: str, name: str) -> None:
    (root / folder).mkdir()
    (root / folder / "__init__.py").write_text(
        "from benchbase.families.ds2 import weight_layout\n"
        "from benchbase_torch_ds2.ds2.family import DS2Family\n\n\n"
        "class Family(DS2Family):\n"
        f"    name = {name!r}\n"
        "    summary = 'a test family'\n"
        "    precisions = frozenset({'fp32'})\n"
        "    layout = weight_layout\n\n\n"
        "FAMILY = Family()\n")


def _discover_with(folder: Path, monkeypatch) -> BackendFamilies:
    monkeypatch.setattr(benchbase_torch_ds2, "__path__", [*benchbase_torch_ds2.__path__, str(folder)])
    try:
        return discover(benchbase_torch_ds2, "torch", ModelFamily)  # anew, past the backend's
    finally:
        for module in [name for name in sys.modules if name.startswith("benchbase_torch_ds2.extra")]:
            del sys.modules[module]
        vars(benchbase_torch_ds2).pop("extra", None)


def test_a_new_family_is_one_new_folder(tmp_path, monkeypatch):
    own = list(FAMILIES)
    _write_family(tmp_path, "extra", "extra")
    found = _discover_with(tmp_path, monkeypatch)
    assert list(found) == sorted([*own, "extra"])
    assert ("extra", frozenset({"fp32"})) in found.narrower_precisions()


def test_a_family_in_a_folder_of_another_name_is_refused(tmp_path, monkeypatch):
    _write_family(tmp_path, "extra", "ds2")
    with pytest.raises(TypeError, match="named after it"):
        _discover_with(tmp_path, monkeypatch)


def test_no_module_of_the_backend_branches_on_a_family_name():
    branch = re.compile(r"family *(==|!=|in) |\.family\b.*[=!]= *[\"']")
    offending = [f"{path.relative_to(PACKAGE)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1) if branch.search(line)]
    assert offending == []
