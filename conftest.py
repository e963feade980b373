"""Shared fixtures of benchbase's tests (tests/) and of its backends' tests (plugins/*/tests/):
a plugin manager without entry points, and a small real corpus.

The corpus is real eSpeak NG speech, synthesized once per test session and prepared into a
feature store with the same code a run uses. Under pytest-xdist (`make test` runs two workers)
the workers share one copy: the first to ask makes it, under a lock, and the others wait for it.

The session's processes (workers and the runs they start) also share one JAX compilation cache:
the JAX backend compiles the same programs for every backend it builds, and XLA's compilation
is most of what its tests cost. The cache lives as long as the session, and its key holds
XLA_FLAGS, so `make test-isa`'s capped programs are compiled anew.

Helpers that tests import (cli_helpers, numerics, official_checker) live in tests/, which
pyproject.toml's pytest ``pythonpath`` puts on the import path.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shutil
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from benchbase.data.prepare import prepare_workload_store
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

SMALL_CORPUS_UTTERANCES = 240
_OWN_JAX_CACHE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    # Before any test module imports JAX, which reads its settings from the environment; xdist's
    # workers and every subprocess inherit them. A cache set by the caller is left alone.
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        folder = Path(tempfile.mkdtemp(prefix="benchbase-test-jax-cache-"))
        config.stash[_OWN_JAX_CACHE] = folder
        os.environ.update(_jax_cache_settings(folder))
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _jax_client_on_one_thread()


def _jax_client_on_one_thread() -> None:
    """A process that runs tests creates JAX's CPU client once, and it keeps the threads it was
    created with. Every JAX backend the tests build in-process has a budget of one thread; a
    test that calls jax.numpy first would otherwise create the client on every core, and the
    kit's thread_budget rule, run later in the same worker, would measure those threads."""
    if importlib.util.find_spec("benchbase_jax_ds2") is None:
        return
    from benchbase_jax_ds2.threads import limit_cpu_threads

    limit_cpu_threads(1)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_OWN_JAX_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        for name in _jax_cache_settings(folder):
            os.environ.pop(name, None)


def _jax_cache_settings(folder: Path) -> dict[str, str]:
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # every program, not only those over 1 s
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(2**31),  # a bound turns on JAX's file lock between processes
    }


# The conformance kit's tests (``BackendConformance``) are one per backend, family and rule; the
# log of a parallel run names only failures, so the session ends with a line per backend suite and
# family saying how many of the kit's rules it ran and how they went.
KIT_CASE = re.compile(r"::(?P<suite>\w+)::test_conformance\[(?P<case>[^\]]+)\]$")
_kit_outcomes: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    match = KIT_CASE.search(report.nodeid)
    if match is None or not (report.when == "call" or report.outcome != "passed"):
        return
    family = match.group("case").split("-", 1)[0]
    _kit_outcomes[(match.group("suite"), family)][report.outcome] += 1


def pytest_terminal_summary(terminalreporter) -> None:
    if not _kit_outcomes:
        return
    terminalreporter.write_sep("-", "conformance kit rules run, by backend suite and family")
    for (suite, family), outcomes in sorted(_kit_outcomes.items()):
        counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        terminalreporter.write_line(f"{suite} {family}: {counts}")


@pytest.fixture
def pm():
    """A plugin manager with benchbase's built-in plugins and no entry points."""
    return get_plugin_manager(load_entrypoints=False)


@pytest.fixture
def registry(pm):
    return collect_registry(pm)


@pytest.fixture(scope="session")
def mini_workload():
    return collect_registry(get_plugin_manager(load_entrypoints=False)).workload("ds2-mini")


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    from benchbase.data.synth import synthesize_corpus

    return _made_once(_session_folder(tmp_path_factory) / "corpus" / "synthetic",
                      lambda root: synthesize_corpus(root, utterances=SMALL_CORPUS_UTTERANCES, seed=7))


PREPARED_STORES = "BENCHBASE_TEST_STORES"
"""A folder holding the small stores already prepared (``features``, ``conformer-features``): a GPU
machine without eSpeak NG or librosa runs the GPU tier on them (benchmarks/gpu_bundle.py makes it)."""


def _prepared(name: str) -> Path | None:
    folder = os.environ.get(PREPARED_STORES)
    return Path(folder) / name if folder else None


@pytest.fixture(scope="session")
def small_store(request, tmp_path_factory, mini_workload) -> Path:
    if (prepared := _prepared("features")) is not None:
        return prepared
    small_corpus = request.getfixturevalue("small_corpus")
    return _made_once(_session_folder(tmp_path_factory) / "store" / "features",
                      lambda out: prepare_workload_store(small_corpus, mini_workload, out))


@pytest.fixture(scope="session")
def conformer_store(request, tmp_path_factory) -> Path:
    """The small corpus prepared for conformer-mini: its own features (80 log-mel bands, no MFCCs)."""
    if (prepared := _prepared("conformer-features")) is not None:
        return prepared
    small_corpus = request.getfixturevalue("small_corpus")
    workload = collect_registry(get_plugin_manager(load_entrypoints=False)).workload("conformer-mini")
    return _made_once(_session_folder(tmp_path_factory) / "store" / "conformer-features",
                      lambda out: prepare_workload_store(small_corpus, workload, out))


def _session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this session that all of its xdist workers share (each worker's own temporary
    folder is a subfolder of it: popen-gw0, popen-gw1, ...)."""
    own = tmp_path_factory.getbasetemp()
    return own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own


def _made_once(folder: Path, make: Callable[[Path], object]) -> Path:
    """``folder``, made by ``make`` for the first worker that asks; a worker asking meanwhile waits.

    The marker beside it is written after ``make`` returns, so no worker reads half a folder, and
    a worker that finds no marker starts over from nothing.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    made = folder.with_name(folder.name + ".made")
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            made.touch()
    return folder
