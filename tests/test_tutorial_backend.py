"""docs/writing-a-backend.md builds a backend that works: its marked code blocks, written out as
the package they describe, register through the entry point they declare and pass every rule
of the conformance kit.

A block belongs to the tutorial's package when an HTML comment ``<!-- tutorial: PATH -->``
precedes it; blocks with the same PATH are concatenated in the order of the page.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchbase.backend import Backend, BackendReference
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-backend.md"
BLOCK = re.compile(r"^<!-- tutorial: (?P<path>[\w./-]+) -->\n```\w*\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)
ROOT = "plugins/tutorial_ds2"
PACKAGE = "benchbase_tutorial_ds2"
BACKEND_NAME = "tutorial"
FILES = {
    f"{ROOT}/pyproject.toml",
    f"{ROOT}/{PACKAGE}/__init__.py",
    f"{ROOT}/{PACKAGE}/plugin.py",
    f"{ROOT}/{PACKAGE}/model.py",
    f"{ROOT}/{PACKAGE}/backend.py",
    f"{ROOT}/tests/test_tutorial_conformance.py",
}


def tutorial_files() -> dict[str, str]:
    files: dict[str, str] = {}
    for match in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        files[match["path"]] = files.get(match["path"], "") + match["code"]
    return files


@pytest.fixture(scope="module")
def package_root(tmp_path_factory):
    """The tutorial's package written out; importable while this module's tests run."""
    base = tmp_path_factory.mktemp("tutorial")
    for path, code in tutorial_files().items():
        target = base / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")
    root = base / ROOT
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def test_the_page_holds_the_whole_package():
    assert set(tutorial_files()) == FILES


@pytest.mark.parametrize("path", sorted(path for path in FILES if path.endswith(".py")))
def test_each_python_file_compiles(path):
    compile(tutorial_files()[path], path, "exec")


def test_pyproject_declares_the_plugin_in_the_benchbase_entry_point_group():
    project = tomllib.loads(tutorial_files()[f"{ROOT}/pyproject.toml"])
    assert project["project"]["entry-points"]["benchbase"] == {BACKEND_NAME: f"{PACKAGE}.plugin"}
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [PACKAGE]
    assert any(requirement.startswith("benchbase") for requirement in project["project"]["dependencies"])


def test_the_plugin_registers_a_reference_to_the_backend(package_root):
    from benchbase_tutorial_ds2 import plugin

    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(plugin, name=BACKEND_NAME)
    registered = collect_registry(manager).backends[BACKEND_NAME]
    assert isinstance(registered, BackendReference)
    assert registered.target == f"{PACKAGE}.backend:TutorialBackend"


def test_importing_the_plugin_imports_no_framework(package_root):
    probe = (f"import sys; sys.path.insert(0, {str(package_root)!r}); import {PACKAGE}.plugin; "
             "print(sorted({'torch', 'jax', 'tensorflow'} & set(sys.modules)))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert found.stdout.strip() == "[]"


def test_the_tutorial_backend_passes_every_conformance_rule(package_root):
    pytest.importorskip("torch")
    testing = pytest.importorskip("benchbase.kit")
    from benchbase_tutorial_ds2 import plugin

    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(plugin, name=BACKEND_NAME)
    backend_class = collect_registry(manager).backend(BACKEND_NAME)
    assert issubclass(backend_class, Backend) and backend_class.name == BACKEND_NAME
    results = testing.run_conformance(backend_class)
    assert [result.name for result in results] == [rule.name for rule in testing.RULES]
    assert [(result.name, result.message) for result in results if not result.passed] == []
