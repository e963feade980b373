"""Every hook documented in full and exercised by a run; a raising hook still closes the run."""

from __future__ import annotations

import inspect
import json

import psutil
import pytest
from test_plugins import LinearCTCBackend

import benchbase
from benchbase import hookspecs
from benchbase.harness import run_benchmark
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig

HOOKS = sorted(name for name, function in inspect.getmembers(hookspecs) if hasattr(function, "benchbase_spec"))


@pytest.mark.parametrize("name", HOOKS)
def test_every_parameter_of_every_hook_is_documented(name):
    function = getattr(hookspecs, name)
    document = inspect.getdoc(function) or ""
    assert "Called" in document, f"{name}: say when it is called"
    for parameter in inspect.signature(function).parameters:
        assert f":param {parameter}:" in document, f"{name}: parameter {parameter} is undocumented"


class RecordEveryHook:
    """Implements every hook and remembers which were called."""

    def __init__(self):
        self.called: set[str] = set()
        self.evaluations: list[int] = []
        """Each evaluation's batches (eval_started), then every eval_batch_completed's (done, batches)."""
        self.eval_batches: list[list[tuple[int, int]]] = []

    @benchbase.hookimpl
    def register_backends(self, register):
        self.called.add("register_backends")
        register(LinearCTCBackend)

    @benchbase.hookimpl
    def register_workloads(self, register):
        self.called.add("register_workloads")

    @benchbase.hookimpl
    def register_hardware_profiles(self, register):
        self.called.add("register_hardware_profiles")

    @benchbase.hookimpl
    def register_strategies(self, register):
        self.called.add("register_strategies")

    @benchbase.hookimpl
    def run_started(self, config, run_dir):
        self.called.add("run_started")

    @benchbase.hookimpl
    def batch_completed(self, progress):
        self.called.add("batch_completed")

    @benchbase.hookimpl
    def eval_started(self, epoch, batches):
        self.called.add("eval_started")
        self.evaluations.append(batches)
        self.eval_batches.append([])

    @benchbase.hookimpl
    def eval_batch_completed(self, subset, done, batches):
        self.called.add("eval_batch_completed")
        self.eval_batches[-1].append((done, batches))

    @benchbase.hookimpl
    def eval_completed(self, evaluation):
        self.called.add("eval_completed")

    @benchbase.hookimpl
    def checkpoint_saved(self, path, batch_index):
        assert path.is_file()
        self.called.add("checkpoint_saved")

    @benchbase.hookimpl
    def run_finished(self, result):
        self.called.add("run_finished")


def _config(registry, tmp_path, small_store, **evaluation):
    workload = registry.workload("ds2-mini")
    data = workload.model_dump()
    data["max_epochs"] = 1
    data["evaluation"].update({"independent_utterances": 0, **evaluation})  # as stand_in_workload
    return RunConfig(workload=type(workload).model_validate(data), backend="linear-ctc",
                     hardware=registry.profile("cpu"), seed=0, out=tmp_path / "run", data=small_store)


def test_a_run_calls_every_hook(pm, tmp_path, small_store):
    recorder = RecordEveryHook()
    pm.register(recorder)
    registry = collect_registry(pm)
    run_benchmark(_config(registry, tmp_path, small_store, checkpoint_every=2), pm, registry.backend("linear-ctc"))
    assert recorder.called == set(HOOKS)
    # Every evaluation counts its dev batches from 1 to what eval_started said.
    assert recorder.evaluations and [[done for done, _ in batches] for batches in recorder.eval_batches] == [
        list(range(1, total + 1)) for total in recorder.evaluations]
    assert all(total == batches for total, progress in zip(recorder.evaluations, recorder.eval_batches)
               for _, batches in progress)


class RaisesWhenTheRunStarts:
    @benchbase.hookimpl
    def register_backends(self, register):
        register(LinearCTCBackend)

    @benchbase.hookimpl
    def run_started(self, config, run_dir):
        raise RuntimeError("plugin broke")


def test_a_plugin_raising_in_run_started_still_gets_a_closed_log_and_no_process_left(pm, tmp_path, small_store):
    pm.register(RaisesWhenTheRunStarts())
    registry = collect_registry(pm)
    before = {child.pid for child in _children()}
    with pytest.raises(RuntimeError, match="plugin broke"):
        run_benchmark(_config(registry, tmp_path, small_store), pm, registry.backend("linear-ctc"))
    events = [json.loads(line.split(" ", 1)[1])
              for line in (tmp_path / "run" / "mllog.log").read_text().splitlines()]
    assert events[-1]["key"] == "run_stop"
    assert events[-1]["metadata"]["status"] == "aborted"
    assert events[-1]["metadata"]["stop_reason"] == "error"
    assert "plugin broke" in events[-1]["metadata"]["error"]
    assert not [child.cmdline() for child in _children() if child.pid not in before]


def _children() -> list[psutil.Process]:
    """Live child processes, but multiprocessing's resource tracker, which lives as long as the interpreter."""
    alive = [child for child in psutil.Process().children(recursive=True)
             if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]
    return [child for child in alive if "resource_tracker" not in " ".join(child.cmdline())]
