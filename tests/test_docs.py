"""The docs against the code they describe, in the manner of datasette's tests/test_docs.py.

Every list a doc keeps is read from the code and looked up in the doc that keeps it, so that a
new package, model family, compliance rule, training strategy, hook, command, conformance-kit
rule or benchmark script fails here until it is documented. A version of the backend contract is named
as ``benchbase.backend.CONTRACT_VERSION`` defines it, a module a doc names exists, and a comment
or doc names a finding by its subject, never by a tracker's number.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import benchbase.hookspecs
from benchbase.backend import CONTRACT_VERSION
from benchbase.cli import cli
from benchbase.compliance.checks import CHECKS
from benchbase.compliance.rules import RULE_KINDS
from benchbase.specs.strategy import BUILTIN_STRATEGIES

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sbatch", ".txt", ".cfg"}
SKIPPED_FOLDERS = {"__pycache__", ".pytest_cache", "build", "dist"}


def _read(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _text_files(*places: str) -> list[Path]:
    """The text files at or under ``places`` (paths relative to the repository)."""
    found = []
    for place in places:
        path = ROOT / place
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        found += [candidate for candidate in candidates if candidate.is_file() and candidate.suffix in TEXT_SUFFIXES
                  and not SKIPPED_FOLDERS & set(candidate.relative_to(ROOT).parts)
                  and not any(part.endswith(".egg-info") for part in candidate.parts)]
    return found


def section(text: str, heading: str) -> str:
    """The section of Markdown ``text`` whose heading line starts with ``heading`` ("## Model
    families"), up to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith(heading)]
    assert starts, f"no heading {heading!r}"
    body = []
    for line in lines[starts[0] + 1:]:
        marks = len(line) - len(line.lstrip("#"))
        if 0 < marks <= level and line[marks:marks + 1] == " ":
            break
        body.append(line)
    return "\n".join(body)


# -------------------------------------------------------------------------------------------
# The backend contract's version
# -------------------------------------------------------------------------------------------

CONTRACT_MENTION = re.compile(r"\bcontract(?:\s+|\s*\(\s*|\s+in\s+`[^`\n]+`\s+\()(?:version\s+|v)?(\d+)\b",
                              re.IGNORECASE)
""""contract v3", "contract 3", "backend contract 3", "contract version 3", "contract (version 3)",
"the contract in `benchbase/backend.py` (version 3)"."""

HISTORY = (
    ("as backend contract 2 did", "the message to a backend whose predict() still returns contract 2's tuple"),
    ("contract 2's (log_probs, output_lengths)", "the comment on the harness's refusal of that tuple"),
    ("backend contract v2's evidence", "the rule sets' own history: rule set 1.1 added that evidence"),
    ("contract version 2 had predict()", "writing-a-backend.md's account of what version 3 changed"),
)
"""Text that names an older contract as history: (the phrase around the number, why it stays)."""

HISTORY_FILES = {
    "docs/BENCHMARKS.md": "a dated record: each section measured a named commit, under the contract that commit had",
}


def stale_contract_mentions(text: str, current: int = CONTRACT_VERSION) -> list[str]:
    """The lines of ``text`` that name a contract version other than ``current``, less HISTORY's phrases."""
    history = [(found.start(), found.end()) for phrase, _ in HISTORY for found in re.finditer(re.escape(phrase), text)]
    stale = []
    for mention in CONTRACT_MENTION.finditer(text):
        if int(mention.group(1)) == current:
            continue
        if any(start <= mention.start() and mention.end() <= end for start, end in history):
            continue
        line_start = text.rfind("\n", 0, mention.start()) + 1
        line_end = text.find("\n", mention.end())
        stale.append(text[line_start:line_end if line_end >= 0 else len(text)].strip())
    return stale


def _contract_files() -> list[str]:
    plugin_packages = [_relative(path) for path in sorted(ROOT.glob("plugins/*/benchbase_*"))]
    files = _text_files("README.md", "CONTRIBUTING.md", "docs", "benchbase", *plugin_packages)
    return [_relative(path) for path in files if _relative(path) not in HISTORY_FILES]


@pytest.mark.parametrize("path", _contract_files())
def test_contract_version_is_the_current_one(path):
    stale = stale_contract_mentions(_read(path))
    assert not stale, (f"{path} names a backend contract other than version {CONTRACT_VERSION} "
                       f"(benchbase.backend.CONTRACT_VERSION): {stale}")


@pytest.mark.parametrize("planted", ["prove a backend against contract v2.", "backend contract 2 returns a tuple",
                                     "## The backend contract (version 2)", "the contract version 4 adds",
                                     "the contract in `benchbase/backend.py` (version 2), whose"])
def test_contract_check_finds_a_planted_old_version(planted):
    text = f"Some prose.\n{planted}\nMore prose about contract v3 and the backend contract (version 3).\n"
    assert stale_contract_mentions(text, current=3) == [planted]


def test_contract_check_passes_the_current_version_and_history():
    text = ("against contract v3; the backend contract (version 3); contract version 3)\n"
            "predict() returned a tuple, as backend contract 2 did; contract 3 returns the log-probabilities\n"
            "# 1.1 added backend contract v2's evidence (the thread budget)\n")
    assert stale_contract_mentions(text, current=3) == []
    assert stale_contract_mentions(text, current=4)  # the day version 4 comes, those lines are stale


# -------------------------------------------------------------------------------------------
# Findings by subject, not by a tracker's number
# -------------------------------------------------------------------------------------------

TRACKER_NUMBER = re.compile("issue" + r"s?\s*#\s*\d", re.IGNORECASE)
"""A tracker's number ("issue" and a hash and digits; spelt so that this file holds none)."""

TRACKER_ROOTS = ["benchbase", "plugins", "docs", "benchmarks", "tests", "examples", "README.md", "CONTRIBUTING.md"]

def _tracker_numbers(root: str) -> list[str]:
    found = []
    for path in _text_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in TRACKER_NUMBER.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            found.append(f"{_relative(path)}:{number}: {text.splitlines()[number - 1].strip()}")
    return found


@pytest.mark.parametrize("root", TRACKER_ROOTS)
def test_no_tracker_numbers(root):
    found = _tracker_numbers(root)
    assert not found, "name the finding by its subject, not by its tracker number:\n" + "\n".join(found)


def test_tracker_pattern():
    assert TRACKER_NUMBER.search("measured (" + "issue" + " #25)")
    assert TRACKER_NUMBER.search("(" + "issues" + " #2, #3)")
    assert TRACKER_NUMBER.search("other_calibration.py, " + "issue" + "\n#25)")
    assert not TRACKER_NUMBER.search("an issue with #include")


# -------------------------------------------------------------------------------------------
# Every list a doc keeps
# -------------------------------------------------------------------------------------------

PACKAGES = sorted(path.parent.name for path in (ROOT / "benchbase").glob("*/__init__.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_package_in_design(package):
    assert re.search(rf"^    {package}/ ", section(_read("docs/design.md"), "## Architecture"), re.MULTILINE)


FAMILIES = sorted(path.parent.name for path in (ROOT / "benchbase" / "families").glob("*/parts.py"))


@pytest.mark.parametrize("family", FAMILIES)
def test_model_family_in_design(family):
    assert f"families/{family}/" in section(_read("docs/design.md"), "## Model families")


@pytest.mark.parametrize("rule", list(RULE_KINDS))
def test_compliance_rule_in_design(rule):
    rows = [line for line in section(_read("docs/design.md"), "## The compliance rules").splitlines()
            if line.startswith(f"| `{rule}` |")]
    assert rows, f"docs/design.md, 'The compliance rules', has no row for {rule}"
    module = CHECKS[rule].__module__.rpartition(".")[2]
    assert f"`{module}`" in rows[0], f"{rule} is enforced in {module}.py"


CHECK_MODULES = sorted({check.__module__.rpartition(".")[2] for check in CHECKS.values()})


@pytest.mark.parametrize("module", CHECK_MODULES)
def test_check_module_in_contributing(module):
    assert f"`{module}.py`" in section(_read("CONTRIBUTING.md"), "## Add or change a compliance rule")


def _torch_strategies() -> set[str]:
    path = ROOT / "plugins/torch_ds2/benchbase_torch_ds2/strategies/__init__.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "IMPLEMENTED" for target in node.targets):
            assert isinstance(node.value, ast.Call)
            return set(ast.literal_eval(node.value.args[0]))
    raise AssertionError(f"no IMPLEMENTED in {path}")


STRATEGIES = sorted({definition.name for definition in BUILTIN_STRATEGIES} | _torch_strategies())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_in_readme(strategy):
    assert f"`{strategy}`" in _read("README.md")


HOOKS = sorted(name for name, value in vars(benchbase.hookspecs).items() if hasattr(value, "benchbase_spec"))


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_in_readme(hook):
    assert f"`{hook}`" in _read("README.md")


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    for name, command in sorted(group.commands.items()):
        yield " ".join((*prefix, name))
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


@pytest.mark.parametrize("command", list(_commands(cli)))
def test_command_in_readme(command):
    assert re.search(rf"\bbenchbase {re.escape(command)}(?![\w-])", _read("README.md"))


def _kit_rules() -> list:
    """Every rule name of every rule set the conformance kit keeps, whatever collections it keeps them in."""
    try:
        from benchbase.kit import conformance
    except ImportError as error:
        return [pytest.param(f"benchbase.kit.conformance does not import: {error}", id="kit-import")]
    names: dict[str, None] = {}

    def collect(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, tuple | list):
            for item in value:
                collect(item)
        elif type(value).__name__ == "Rule" and isinstance(getattr(value, "name", None), str):
            names[value.name] = None

    for name, value in vars(conformance).items():
        if not name.startswith("__"):
            collect(value)
    assert names, "found no conformance rules in benchbase.kit.conformance"
    return list(names)


@pytest.mark.parametrize("rule", _kit_rules())
def test_kit_rule_in_writing_a_backend(rule):
    assert f"`{rule}`" in _read("docs/writing-a-backend.md")


SCRIPTS = sorted(path.name for path in (ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_in_its_readme(script):
    rows = [line for line in _read("benchmarks/README.md").splitlines() if line.startswith(f"| `{script}` |")]
    assert rows, f"benchmarks/README.md has no row for {script}"
    sections = re.findall(r'"([^"]+)"', rows[0].rsplit("|", 2)[1])
    assert all(_cites_a_section(title) for title in sections), f"{script}: {sections}"


# -------------------------------------------------------------------------------------------
# What the docs point at exists
# -------------------------------------------------------------------------------------------

SECTION_CITATION = re.compile(r"BENCHMARKS\.md,\s+\"([^\"]+)\"")


def _title(text: str) -> str:
    """A section title as a citation may spell it: over comment lines, without backticks or "'s"."""
    text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    return " ".join(text.replace("`", "").replace("'s", "").lower().split())


def _section_citations() -> list:
    found = []
    for path in _text_files("README.md", "CONTRIBUTING.md", "docs", "benchbase", "benchmarks", "examples", "tests"):
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [pytest.param(match.group(1), id=f"{_relative(path)}:{_title(match.group(1))[:30]}")
                  for match in SECTION_CITATION.finditer(text)]
    return found


def _cites_a_section(title: str) -> bool:
    headings = [_title(line.lstrip("#")) for line in _read("docs/BENCHMARKS.md").splitlines() if line.startswith("#")]
    return any(_title(title) in heading for heading in headings)


@pytest.mark.parametrize("title", _section_citations())
def test_cited_benchmarks_section_exists(title):
    assert _cites_a_section(title), f"docs/BENCHMARKS.md has no section {title!r}"


MODULE_PATH = re.compile(r"\b(?:benchbase|plugins/\w+/benchbase_\w+)/[\w/]*\w\.py\b")
TUTORIAL = "plugins/tutorial_ds2/"  # written from docs/writing-a-backend.md by tests/test_tutorial_backend.py


SHORT_MODULE_PATH = re.compile(r"`((\w+)/[\w/]*\w\.py)`")
"""A module named from benchbase/ down, as docs/design.md does: `harness/runner.py`."""


def _module_paths() -> list[str]:
    files = _text_files("README.md", "CONTRIBUTING.md", "docs", "benchbase", "benchmarks")
    found = set()
    for path in files:
        if _relative(path) in HISTORY_FILES:
            continue
        text = path.read_text(encoding="utf-8")
        found |= {match.group(0) for match in MODULE_PATH.finditer(text)}
        found |= {f"benchbase/{match.group(1)}" for match in SHORT_MODULE_PATH.finditer(text)
                  if match.group(2) in PACKAGES}
    return sorted(path for path in found if not path.startswith(TUTORIAL))


@pytest.mark.parametrize("path", _module_paths())
def test_named_module_exists(path):
    assert (ROOT / path).is_file(), f"the docs or the code name {path}, which does not exist"
