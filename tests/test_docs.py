"""The docs against the code they describe, in the manner of datasette's tests/test_docs.py.

Every list a doc keeps is read from the code and looked up in the doc that keeps it, so that a
new package, model family, compliance rule, training strategy, hook, command, conformance-kit
rule or benchmark script fails here until it is documented. A version of the backend contract is named
as ``benchbase.backend.CONTRACT_VERSION`` defines it, a module a doc names exists, and a comment
or doc names a finding by its subject, never by a tracker's number.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

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


# -------------------------------------------------------------------------------------------
# What the prose names resolves: dotted names, repository paths, command options, numbers
# -------------------------------------------------------------------------------------------

PROSE_FILES = ["README.md", "CONTRIBUTING.md", *sorted(_relative(path) for path in (ROOT / "docs").glob("*.md")
                                                       if _relative(path) not in HISTORY_FILES)]

DOTTED_NAME = re.compile(r"(?<![\w./-])benchbase(?:\.[A-Za-z_]\w*)+")
"""A dotted name from the top package down: `benchbase.families.parts.FamilyParts`."""


def _has_attribute(owner: object, name: str) -> bool:
    """Whether ``owner`` has ``name``, counting what a class declares without a class attribute
    (a pydantic field, a dataclass field, a Protocol's annotated member)."""
    if hasattr(owner, name):
        return True
    if not isinstance(owner, type):
        return False
    return any(name in getattr(base, "model_fields", {}) or name in getattr(base, "__dataclass_fields__", {})
               or name in vars(base).get("__annotations__", {}) for base in owner.__mro__)


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute (a chain of them) of the longest module it
    starts with, named where it lives (or is exported), not through a module that imports it."""
    import importlib

    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = ".".join(parts[:split])
        try:
            owner: object = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is not None and module.startswith(error.name):
                continue  # no such module: the rest may be an attribute of a shorter one
            raise  # the module exists and an import of its own failed: its traceback says where
        if split < len(parts) and not _at_home(owner, parts[split]):
            return False
        for name in parts[split:]:
            if not _has_attribute(owner, name):
                return False
            owner = getattr(owner, name, None)
        return True
    return False


def _at_home(module: object, name: str) -> bool:
    """Whether ``module`` is where a reader should find ``name``: it defines it or exports it in
    ``__all__`` (`benchbase.specs.ModelSpec`), not merely imports it from its home."""
    value = getattr(module, name, None)
    home = getattr(value, "__module__", None)
    return (name in getattr(module, "__all__", ()) or home in (None, getattr(module, "__name__", None))
            or isinstance(value, ModuleType))


def unresolved_names(text: str) -> list[str]:
    """The dotted ``benchbase.`` names in ``text`` that do not resolve (a sentence's full stop is not part of one)."""
    return sorted({match.group(0) for match in DOTTED_NAME.finditer(text) if not resolves(match.group(0))})


@pytest.mark.parametrize("path", PROSE_FILES)
def test_dotted_names_resolve(path):
    missing = unresolved_names(_read(path))
    assert not missing, f"{path} names what benchbase does not have: {missing}"


def _repository_tops() -> frozenset[str]:
    """The first component of every path the repository tracks (its folders and top-level files)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return frozenset(line.split("/", 1)[0] for line in listed.stdout.splitlines() if "/" in line)


BACKTICKED = re.compile(r"`([^`\s]+)`")
PROSE_PATH = re.compile(r"(?<![\w./`-])((?:[\w-]+/)+[\w.-]*\w\.(?:md|py|yaml|toml|sh|sbatch|png))\b")
"""A file named in prose, without backticks: docs/writing-a-workload.md, examples/slurm/benchbase.sbatch."""
PLACEHOLDER = re.compile(r"\.\.\.|[*<>{}]|(?:^|/)(?:[A-Z][A-Z0-9_]*|X\.Y)(?:[./-]|$)|benchbase-X\.Y")
"""A path that stands for many: `plugins/NAME/tests/`, `benchbase/workloads/WORKLOAD.yaml`, `runs/...`."""


def missing_paths(text: str, tops: frozenset[str]) -> list[str]:
    """The repository paths in ``text``, backticked or files in prose (their first folder one the
    repository tracks), that do not exist; run-folder contents (`runs/...`, `result.json`) are not repository paths."""
    missing = set()
    for match in [*BACKTICKED.finditer(text), *PROSE_PATH.finditer(text)]:
        path = re.sub(r"\[[^\]]*\]$", "", match.group(1))  # `plugins/tf_ds2[gpu]`: the folder, less its extra
        path = re.sub(r":\w+$", "", path)  # `module.py:Class`
        if "/" not in path or path.split("/", 1)[0] not in tops or PLACEHOLDER.search(path):
            continue
        if path.startswith(TUTORIAL):
            continue
        if not (ROOT / path).exists():
            missing.add(path)
    return sorted(missing)


@pytest.mark.parametrize("path", PROSE_FILES)
def test_named_paths_exist(path):
    missing = missing_paths(_read(path), _repository_tops())
    assert not missing, f"{path} names repository paths that do not exist: {missing}"


def _usage_lines(text: str) -> Iterator[str]:
    """Each `benchbase ...` command of a Markdown code block (indented four spaces), its continuation
    lines joined to it and its comments cut."""
    command: list[str] = []
    for line in [*text.splitlines(), ""]:
        code = line.split("#", 1)[0].rstrip() if line.startswith("    ") else ""
        if command and code.startswith("     ") and not code.lstrip().startswith("benchbase "):
            command.append(code.strip().rstrip("\\"))
            continue
        if command:
            yield " ".join(command)
        command = [code.strip().rstrip("\\")] if code.lstrip().startswith("benchbase ") else []


def unknown_options(text: str, group: click.Group = cli) -> list[str]:
    """"COMMAND --option" for each option of a usage line in ``text`` that the command's ``--help`` lacks."""
    unknown = []
    for usage in _usage_lines(text):
        words = usage.split()[1:]
        command: click.Command = group
        path = ["benchbase"]
        while words and isinstance(command, click.Group) and words[0] in command.commands:
            path.append(words[0])
            command = command.commands[words.pop(0)]
        known = {option for param in command.params for option in (*param.opts, *param.secondary_opts)}
        known |= {option for param in group.params for option in param.opts} if len(path) == 1 else set()
        for word in words:
            option = re.match(r"\[?(--?[A-Za-z][\w-]*)", word)
            if option and option.group(1) not in known:
                unknown.append(f"{' '.join(path)} {option.group(1)}")
    return unknown


@pytest.mark.parametrize("path", PROSE_FILES)
def test_usage_options_exist(path):
    unknown = unknown_options(_read(path))
    assert not unknown, f"{path} shows options its commands do not have: {unknown}"


def _readme_numbers() -> list:
    from benchbase.specs.model import ModelSpec
    from benchbase.specs.workload import EvalSpec

    fields = EvalSpec.model_fields
    symbols = {type(bound).__name__: bound for bound in ModelSpec.model_fields["symbols"].metadata}
    return [
        pytest.param(r"Every (\d+) batches the harness greedy-decodes", fields["log_sentences_every"].default,
                     id="log_sentences_every"),
        pytest.param(r"every (\d+) it writes an atomic checkpoint", fields["checkpoint_every"].default,
                     id="checkpoint_every"),
        pytest.param(r"`--symbols N` \((\d+) to", symbols["Ge"].ge, id="symbols-least"),
        pytest.param(r"`--symbols N` \(\d+ to (\d+)", symbols["Le"].le, id="symbols-most"),
    ]


@pytest.mark.parametrize(("pattern", "value"), _readme_numbers())
def test_readme_number_is_the_codes_default(pattern, value):
    found = re.search(pattern, _read("README.md"))
    assert found, f"README.md no longer says {pattern!r}: say it again, or hold its new wording here"
    assert int(found.group(1)) == value, f"README.md says {found.group(0)!r}; the code's value is {value}"


def _plugin_packages() -> list:
    return [pytest.param(path, id=path.parent.name) for path in sorted(ROOT.glob("plugins/*/benchbase_*"))
            if (path / "__init__.py").is_file()]


@pytest.mark.parametrize("package", _plugin_packages())
def test_plugin_description_names_its_families(package):
    import importlib
    import tomllib

    from benchbase.families import folders

    families = folders.discover(importlib.import_module(package.name), package.parent.name, folders.BackendFamily)
    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text(encoding="utf-8"))
    description = pyproject["project"]["description"]
    assert families.summaries() in description, (
        f"plugins/{package.parent.name}/pyproject.toml's description names other families than the "
        f"backend's folders hold ({families.summaries()}): {description!r}")


RETIRED_SCRIPT = re.compile(r"`benchmarks/(\w+\.(?:py|sh))`, retired; at commit ([0-9a-f]{7,40})")


def _benchmarks_md_scripts() -> list[str]:
    return sorted(set(re.findall(r"\bbenchmarks/(\w+\.(?:py|sh))\b", _read("docs/BENCHMARKS.md"))))


@pytest.mark.parametrize("script", _benchmarks_md_scripts())
def test_benchmarks_md_script_exists_or_names_its_commit(script):
    """A dated record may name a script since retired, with the commit that still holds it."""
    import subprocess

    if (ROOT / "benchmarks" / script).is_file():
        return
    commits = {commit for name, commit in RETIRED_SCRIPT.findall(_read("docs/BENCHMARKS.md")) if name == script}
    assert commits, (f"docs/BENCHMARKS.md names benchmarks/{script}, which is gone: "
                     f"say '`benchmarks/{script}`, retired; at commit HASH'")
    for commit in commits:
        held = subprocess.run(["git", "cat-file", "-e", f"{commit}:benchmarks/{script}"], cwd=ROOT, capture_output=True,
                              check=False)
        assert held.returncode == 0, f"commit {commit} holds no benchmarks/{script}"


CODE_NAME = re.compile(r"`(_?[A-Za-z]\w*)(?:\(\))?`")
"""A backticked bare name: `CTCParts`, `bounded_ctc_step`, `register_workloads()`."""

OTHER_PROJECTS_NAMES = {
    "result_summarizer": "MLPerf's results summarizer (mlperf-logging), which docs/submitting.md compares with",
    "system_desc_checker": "MLPerf's system description checker (mlperf-logging), likewise",
}


def _looks_like_code(name: str) -> bool:
    """snake_case with an underscore, CamelCase or a private name: a word of prose is none of them."""
    return "_" in name.strip("_") or name.startswith("_") or bool(re.match(r"[A-Z][a-z0-9]+[A-Z]", name))


@functools.cache
def _defined_names() -> frozenset[str]:
    """Every name the repository's code defines or spells: functions, classes, assigned names,
    attributes, arguments, the words of its string constants (rule, strategy and key names) and of
    its YAML files and shell scripts."""
    names: set[str] = set()
    sources = [*_text_files("benchbase", "plugins", "benchmarks", "tests"), *ROOT.glob("benchmarks/*.sh"),
               ROOT / "Makefile"]
    for path in [source for source in sources if source != Path(__file__).resolve()]:  # this file plants drifts
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix != ".py":
            names.update(re.findall(r"\w+", text))
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name | ast.arg | ast.keyword | ast.Attribute):
                names.add(getattr(node, "id", None) or getattr(node, "arg", None) or getattr(node, "attr", ""))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(re.findall(r"\w+", node.value))
    return frozenset(names)


def undefined_code_names(text: str) -> list[str]:
    """The backticked bare names in ``text`` that look like code and that neither the repository
    nor the text's own code blocks define (a tutorial defines its own classes)."""
    own = set(re.findall(r"^\s*(?:def|class)\s+(\w+)", text, re.MULTILINE))
    return sorted({match.group(1) for match in CODE_NAME.finditer(text)
                   if _looks_like_code(match.group(1)) and match.group(1) not in _defined_names() | own
                   and match.group(1) not in OTHER_PROJECTS_NAMES})


@pytest.mark.parametrize("path", PROSE_FILES)
def test_code_names_are_defined(path):
    undefined = undefined_code_names(_read(path))
    assert not undefined, f"{path} names code that the repository does not have: {undefined}"


@pytest.mark.parametrize(("check", "planted", "found"), [
    (unresolved_names, "the seam `benchbase.families.parts.FamilyPart`.", ["benchbase.families.parts.FamilyPart"]),
    (unresolved_names, "`benchbase.families.ds2.reference.RoundedArithmetic`",
     ["benchbase.families.ds2.reference.RoundedArithmetic"]),  # it lives in benchbase.numerics.rounded
    (undefined_code_names, "(`bounded_ctc_steps` gives its reference step)", ["bounded_ctc_steps"]),
    (lambda text: missing_paths(text, frozenset({"plugins", "docs"})), "`plugins/torch/`, docs/writing-a-workloads.md",
     ["docs/writing-a-workloads.md", "plugins/torch/"]),
    (unknown_options, "    benchbase run --workload W [--seed 0] [--fast]\n                  [--turbo]\n",
     ["benchbase run --fast", "benchbase run --turbo"]),
    (unknown_options, "    benchbase results compare --by system sys1   # or --nope\n", []),  # a comment is no usage
])
def test_prose_checks_find_a_planted_drift(check, planted, found):
    assert check(planted) == found
