"""The package's shape, as docs/design.md ("Architecture") draws it: which package may import which.

Read from the source with ``ast``, so the rules hold for code paths no other test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import benchbase

PACKAGE = Path(benchbase.__file__).parent
LONGEST_MODULE = 400
LOOSE_MODULES = 8
EXEMPT_FROM_LENGTH = {"decode/_search.py"}  # one numba kernel, kept whole so it compiles as one unit


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The benchbase modules ``name`` imports, at the top or inside a function (a deferred import is one too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for statement in ast.walk(node):
            if isinstance(statement, ast.Import):
                imported |= {alias.name for alias in statement.names}
            elif isinstance(statement, ast.ImportFrom):
                base = statement.module or ""
                if statement.level:
                    parent = package.split(".")[: len(package.split(".")) - statement.level + 1]
                    base = ".".join([*parent, base]).strip(".")
                imported.add(base)
                imported |= {f"{base}.{alias.name}" for alias in statement.names}
    return {module for module in imported if module in MODULES and module != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _owner(module: str) -> str:
    """The package a module belongs to, one level below benchbase (``benchbase.harness.runner`` -> harness)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_top_level_holds_the_contract_the_run_folder_and_leaf_utilities_only():
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(loose) <= LOOSE_MODULES, loose


def test_no_module_is_longer_than_the_limit():
    long = {str(path.relative_to(PACKAGE)): length for path in PACKAGE.rglob("*.py")
            if (length := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE}
    assert set(long) <= EXEMPT_FROM_LENGTH, long


def test_there_is_no_import_circle():
    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            circle = trail[trail.index(module):] + [module]
            raise AssertionError("import circle: " + " -> ".join(circle))
        if module in finished:
            return
        for imported in sorted(GRAPH[module]):
            if not (imported.startswith(module + ".") or module.startswith(imported + ".")):
                visit(imported, [*trail, module])  # a package and its own modules are one unit
        finished.add(module)

    finished: set[str] = set()
    for module in sorted(GRAPH):
        visit(module, [])


def _unit(module: str) -> str:
    """A module's package one level below benchbase (``harness``), or the module itself at the top level."""
    parts = module.split(".")
    if len(parts) == 1:
        return module
    return parts[1] if len(parts) > 2 or MODULES[module].name == "__init__.py" else module


def test_there_is_no_import_circle_between_packages():
    """Modules may form no circle (above); packages may not either: one package importing another
    that imports it back means neither can be read, tested or moved on its own."""
    edges: dict[str, set[str]] = {}
    for module, imports in GRAPH.items():
        edges.setdefault(_unit(module), set()).update(_unit(imported) for imported in imports)

    def reaches(start: str, goal: str) -> list[str] | None:
        trail, seen = [start], {start}
        stack = [(start, iter(sorted(edges.get(start, set()) - {start})))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                trail.pop()
            elif child == goal:
                return [*trail, goal]
            elif child not in seen:
                seen.add(child)
                trail.append(child)
                stack.append((child, iter(sorted(edges.get(child, set()) - {child}))))
        return None

    circles = [" -> ".join([unit, *circle]) for unit in sorted(edges) for imported in sorted(edges[unit] - {unit})
               if (circle := reaches(imported, unit))]
    assert not circles, circles[0]


def test_nothing_that_decides_a_score_imports_the_conformance_kit_or_test_tooling():
    """The kit (``benchbase.kit``) proves backends and ``benchbase.testing`` is pytest tooling: the
    harness and the families, whose code decides a score, import neither, and nothing outside
    ``benchbase.testing`` imports it."""
    kit_users = {module for module, imports in GRAPH.items() if _owner(module) in ("harness", "families", "numerics")
                 and any(imported.startswith("benchbase.kit") for imported in imports)}
    testing_users = {module for module, imports in GRAPH.items() if _owner(module) != "testing"
                     and any(imported.startswith("benchbase.testing") for imported in imports)}
    assert not kit_users and not testing_users, (kit_users, testing_users)


@pytest.mark.parametrize(("importer", "forbidden"), [
    ("compliance", {"harness", "cli", "report", "sweeps.runner"}),  # re-checks a run without its producer's code
    ("report", {"harness", "cli", "compliance.checks"}),      # reads run folders through run_folder and specs
    ("specs", {"harness", "cli", "compliance", "report", "data", "plugin_host"}),  # specs are data
    ("harness", {"cli", "report"}),                           # the harness never prints
    ("metrics", {"harness", "cli", "report", "compliance"}),
    ("rcp", {"harness", "cli", "sweeps.runner"}),             # judges run folders without the code that made them
])
def test_a_package_imports_only_what_the_architecture_allows(importer, forbidden):
    offending = {(module, imported) for module, imports in GRAPH.items() if _owner(module) == importer
                 for imported in imports
                 if any(imported == f"benchbase.{name}" or imported.startswith(f"benchbase.{name}.")
                        for name in forbidden)}
    assert not offending


def test_the_core_never_imports_a_backend():
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [name for name in names if name.startswith("benchbase_")], path
