"""Shared fixtures: a plugin manager without entry points, and a small real corpus.

The corpus is real eSpeak NG speech, synthesized once per test session and prepared into a
feature store with the same code a run uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchbase.data.prepare import prepare_store
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

SMALL_CORPUS_UTTERANCES = 240


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

    root = tmp_path_factory.mktemp("corpus") / "synthetic"
    synthesize_corpus(root, utterances=SMALL_CORPUS_UTTERANCES, seed=7)
    return root


@pytest.fixture(scope="session")
def small_store(tmp_path_factory, small_corpus, mini_workload) -> Path:
    out = tmp_path_factory.mktemp("store") / "features"
    data = mini_workload.data
    prepare_store(small_corpus, {"train": data.train, "dev": data.dev, "test": data.test}, mini_workload.features,
                  mini_workload.model, data.max_duration, out)
    return out
