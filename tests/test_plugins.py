"""The plugin host: an in-test third-party backend, entry-point discovery, restriction."""

from __future__ import annotations

import json
import re
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest
import torch
from cli_helpers import run_benchbase

import benchbase
from benchbase import hookspecs, plugin_host
from benchbase.backend import Backend, BackendReference, Inputs
from benchbase.cli import main
from benchbase.data.store import FeatureStore
from benchbase.errors import InputError
from benchbase.harness import run_benchmark
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig, WorkloadSpec
from benchbase.telemetry import environment


def stand_in_workload(workload: WorkloadSpec, **update) -> WorkloadSpec:
    """``workload`` for LinearCTCBackend, whose model is not the workload's: benchbase's reference
    cannot re-score its weights, so independent scoring is off (which makes a run open-division)."""
    evaluation = workload.evaluation.model_copy(update={"independent_utterances": 0})
    return workload.model_copy(update={"evaluation": evaluation, **update})


class LinearCTCBackend(Backend):
    """A third party's backend, written against the public contract only: a per-frame
    linear layer trained with CTC and plain SGD (a real, if weak, acoustic model)."""

    name = "linear-ctc"
    description = "in-test third-party backend"

    def build(self, context):
        if context.plan.threads:  # the contract's thread budget: `check` fails a run over it
            torch.set_num_threads(context.plan.threads)
        torch.manual_seed(context.seed)
        self.layer = torch.nn.Linear(context.feature_dimension, context.model.symbols)
        self.optimizer = torch.optim.SGD(self.layer.parameters(), lr=0.01)

    def _forward(self, inputs: Inputs):
        return torch.log_softmax(self.layer(torch.from_numpy(inputs.features)), dim=-1)

    def train_step(self, batch):
        log_probs = self._forward(batch)
        loss = torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), torch.from_numpy(batch.labels),
                                            torch.from_numpy(batch.feature_lengths),
                                            torch.from_numpy(batch.label_lengths), reduction="sum",
                                            zero_infinity=True) / batch.size
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def predict(self, inputs):
        with torch.no_grad():
            return self._forward(inputs).numpy()

    def save_checkpoint(self, path: Path):
        torch.save(self.layer.state_dict(), path)

    def load_checkpoint(self, path: Path):
        self.layer.load_state_dict(torch.load(path))

    def parameter_count(self):
        return sum(p.numel() for p in self.layer.parameters())

    def export_weights(self):
        # Not the DS2 layout: this backend runs through the harness but would fail the kit.
        return {name: tensor.detach().numpy() for name, tensor in self.layer.state_dict().items()}

    def import_weights(self, weights):
        self.layer.load_state_dict({name: torch.from_numpy(array) for name, array in weights.items()})


class ThirdPartyPlugin:
    def __init__(self):
        self.evaluations = []

    @benchbase.hookimpl
    def register_backends(self, register):
        register(LinearCTCBackend)

    @benchbase.hookimpl
    def eval_completed(self, evaluation):
        self.evaluations.append(evaluation)


def test_an_in_test_backend_runs_through_the_harness(pm, tmp_path, small_store):
    plugin = ThirdPartyPlugin()
    pm.register(plugin)
    registry = collect_registry(pm)
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=2)
    config = RunConfig(workload=workload, backend="linear-ctc", hardware=registry.profile("cpu"), seed=1,
                       out=tmp_path / "run", data=small_store)
    result = run_benchmark(config, pm, registry.backend("linear-ctc"))
    assert result.status == "aborted" and result.stop_reason == "max_epochs" and result.epochs == 2
    assert [e.epoch for e in plugin.evaluations] == [1, 2]
    assert result.parameter_count == 93 * 30 + 30
    written = json.loads((tmp_path / "run" / "result.json").read_text())
    assert written["backend"] == "linear-ctc" and written["batches"] == result.batches > 0


def test_a_plugin_registering_a_name_twice_is_skipped_and_reported(pm):
    class Twice:
        @benchbase.hookimpl
        def register_backends(self, register):
            register(LinearCTCBackend)
            register(LinearCTCBackend)

    pm.register(Twice(), name="twice")
    registry = collect_registry(pm)
    assert "linear-ctc" not in registry.backends and "ds2" in registry.workloads
    assert [failure.plugin for failure in pm.failures] == ["twice"]
    assert "backend 'linear-ctc' is registered already" in pm.failures[0].error


def test_a_plugin_cannot_redefine_a_builtin_workload(pm, registry):
    builtin = registry.workload("ds2")

    class Impostor:
        @benchbase.hookimpl
        def register_workloads(self, register):
            register(builtin.model_copy(update={"max_minutes": 1.0}))

    pm.register(Impostor(), name="impostor")
    assert collect_registry(pm).workload("ds2") == builtin
    assert "workload 'ds2' is registered already" in pm.failures[0].error


def test_a_plugin_raising_in_a_registration_hook_is_skipped_and_the_others_still_register(pm):
    class Broken:
        @benchbase.hookimpl
        def register_hardware_profiles(self, register):
            raise RuntimeError("no profiles today")

        @benchbase.hookimpl
        def register_backends(self, register):
            register(LinearCTCBackend)

    pm.register(Broken(), name="broken")
    pm.register(ThirdPartyPlugin(), name="third-party")
    registry = collect_registry(pm)
    assert registry.backend("linear-ctc") is LinearCTCBackend and "cpu" in registry.profiles
    assert [failure.describe() for failure in pm.failures] == [
        "plugin 'broken' (not installed) skipped: RuntimeError: no profiles today"]


def test_a_plugin_that_fails_to_import_is_one_line_in_plugins_and_other_commands_work(tmp_path):
    site = tmp_path / "site"
    (site / "broken_benchbase_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "broken_benchbase_plugin-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-benchbase-plugin\nVersion: 1.0\n")
    (site / "broken_benchbase_plugin-1.0.dist-info" / "entry_points.txt").write_text(
        "[benchbase]\nbroken = broken_benchbase_plugin\n")
    (site / "broken_benchbase_plugin.py").write_text("import a_module_that_does_not_exist\n")
    env = {"PYTHONPATH": str(site), "COLUMNS": "300"}
    env.pop("BENCHBASE_LOAD_PLUGINS", None)
    listed = run_benchbase("plugins", env={**env, "BENCHBASE_LOAD_PLUGINS": "broken,torch"})
    line = next(line for line in listed.stdout.splitlines() if "broken" in line)
    assert "broken-benchbase-plugin" in line and "ModuleNotFoundError" in line
    assert "torch" in listed.stdout
    assert listed.returncode == 1  # the listing is for reading, the exit code for CI: a plugin was skipped
    assert listed.stderr.splitlines() == ["benchbase: error: plugin 'broken' (broken-benchbase-plugin) skipped: "
                                          "ModuleNotFoundError: No module named 'a_module_that_does_not_exist'"]
    shown = run_benchbase("workloads", env={**env, "BENCHBASE_LOAD_PLUGINS": "broken"})
    assert shown.returncode == 0 and "ds2-mini" in shown.stdout


def test_unknown_names_list_what_exists(registry):
    with pytest.raises(InputError,
                       match=r"unknown workload 'ds3'; available: conformer, conformer-mini, ds2, ds2-mini"):
        registry.workload("ds3")
    with pytest.raises(InputError, match=r"unknown hardware profile 'sys9'; available: cpu, cpu2, sys1, sys10, sys2"):
        registry.profile("sys9")


class _FakeDistribution(metadata.Distribution):
    """An installed distribution that exists only in this test, with one benchbase entry point."""

    def __init__(self, name: str, module: str):
        self._files = {
            "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 9.9\n",
            "entry_points.txt": f"[benchbase]\n{name} = {module}\n",
        }

    def read_text(self, filename):
        return self._files.get(filename)

    def locate_file(self, path):
        return Path(path)


def install_fake_plugin(monkeypatch, distribution_name: str, module_name: str, hook: str,
                        backend: type[Backend] = LinearCTCBackend) -> None:
    """A distribution whose one entry point is a module implementing ``hook`` (registering ``backend``)."""
    module = types.ModuleType(module_name)
    setattr(module, hook, benchbase.hookimpl(lambda register: register(backend)))
    monkeypatch.setitem(sys.modules, module_name, module)
    distribution = _FakeDistribution(distribution_name, module_name)
    monkeypatch.setattr(plugin_host.metadata, "entry_points",
                        lambda group: distribution.entry_points.select(group=group))


@pytest.fixture
def fake_entry_points(monkeypatch):
    install_fake_plugin(monkeypatch, "fake-plugin", "fake_benchbase_plugin", "register_backends")


def test_entry_points_are_discovered(fake_entry_points, monkeypatch):
    monkeypatch.delenv("BENCHBASE_LOAD_PLUGINS", raising=False)
    manager = plugin_host.get_plugin_manager()
    assert manager.has_plugin("fake-plugin")
    assert "linear-ctc" in collect_registry(manager).backends
    assert environment.entry_point_distributions() == {"fake-plugin": "fake-plugin 9.9"}


@pytest.mark.parametrize(("allowed", "loaded"), [("", False), ("fake-plugin", True), ("other", False)])
def test_benchbase_load_plugins_restricts_entry_points(fake_entry_points, monkeypatch, allowed, loaded):
    monkeypatch.setenv("BENCHBASE_LOAD_PLUGINS", allowed)
    assert plugin_host.get_plugin_manager().has_plugin("fake-plugin") is loaded


def test_a_misspelt_hook_fails_benchbase_plugins_with_a_line_naming_it(monkeypatch, capsys):
    install_fake_plugin(monkeypatch, "misspelt-plugin", "misspelt_benchbase_plugin", "register_backend")
    monkeypatch.delenv("BENCHBASE_LOAD_PLUGINS", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["plugins"])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "benchbase: error: plugin 'misspelt-plugin' (misspelt-plugin) skipped: "
        "unknown hook 'register_backend' (did you mean 'register_backends'?)")
    manager = plugin_host.get_plugin_manager()
    assert not manager.has_plugin("misspelt-plugin")  # skipped whole, nothing half-registered
    assert "linear-ctc" not in collect_registry(manager).backends


def test_every_hook_is_documented():
    for name in dir(hookspecs):
        function = getattr(hookspecs, name)
        if hasattr(function, "benchbase_spec"):
            assert function.__doc__ and ":param" in function.__doc__, name


def test_each_invocation_gets_a_fresh_manager():
    assert plugin_host.get_plugin_manager(False) is not plugin_host.get_plugin_manager(False)


def test_a_run_evaluates_with_the_decoder_its_workload_names(pm, tmp_path, small_store):
    """Word beam search through the harness: the LM is built from the store's training
    transcripts in init, and every dev hypothesis is made of dictionary words."""
    pm.register(ThirdPartyPlugin())
    registry = collect_registry(pm)
    workload = registry.workload("ds2-mini")
    data = workload.model_dump()
    data["max_epochs"] = 1
    data["evaluation"].update(decoder="word_beam", beam_width=8, independent_utterances=0)  # stand_in_workload
    config = RunConfig(workload=type(workload).model_validate(data), backend="linear-ctc",
                       hardware=registry.profile("cpu"), seed=2, out=tmp_path / "run", data=small_store)
    run_benchmark(config, pm, registry.backend("linear-ctc"))
    assert (small_store / "lm.npz").is_file()
    decoded_file = tmp_path / "run" / "decoded" / "dev-clean-epoch-001.jsonl"
    decoded = [json.loads(line) for line in decoded_file.read_text().splitlines()]
    vocabulary = {word for shard in FeatureStore(small_store).shards(["train"])
                  for utterance in FeatureStore(small_store).read(shard) for word in utterance.transcript.split()}
    assert all(set(line["hypothesis"].split()) <= vocabulary for line in decoded)
    events = [json.loads(line.split(" ", 1)[1]) for line in (tmp_path / "run" / "mllog.log").read_text().splitlines()]
    assert {e["key"]: e["value"] for e in events}["eval_decoder"] == "word_beam"


def test_a_backend_reference_is_imported_only_when_asked_for(pm):
    class ByReference:
        @benchbase.hookimpl
        def register_backends(self, register):
            register(BackendReference("lazy", "test_plugins:LinearCTCBackend"))
            register(BackendReference("broken", "benchbase.specs:WorkloadSpec"))

    pm.register(ByReference())
    registry = collect_registry(pm)
    assert isinstance(registry.backends["lazy"], BackendReference)
    assert registry.backend("lazy").name == "linear-ctc"
    with pytest.raises(TypeError, match="not a benchbase Backend subclass"):
        registry.backend("broken")


# --- register_workloads, as docs/writing-a-workload.md describes it -------------------------


def _workload_doc_blocks() -> dict[str, str]:
    """The first ```yaml, ```python and ```toml block of docs/writing-a-workload.md."""
    text = (Path(__file__).parents[1] / "docs" / "writing-a-workload.md").read_text()
    return {language: re.search(rf"```{language}\n(.*?)```", text, re.S).group(1)
            for language in ("yaml", "python", "toml")}


def test_a_workload_a_plugin_registers_is_found_and_resolves_as_closed(pm):
    from benchbase.cli.run_plan import RunRequest, resolve_run
    from benchbase.specs import WorkloadSpec
    from benchbase.specs.yaml_files import load_spec_text

    class MyWorkloads:
        @benchbase.hookimpl
        def register_workloads(self, register):
            register(load_spec_text(WorkloadSpec, _workload_doc_blocks()["yaml"], "ds2-tiny.yaml"))

    pm.register(MyWorkloads(), name="my-workloads")
    pm.register(ThirdPartyPlugin())
    registry = collect_registry(pm)
    assert registry.workload("ds2-tiny").model.lstm_units == 64 and not pm.failures
    resolved = resolve_run(RunRequest(workload="ds2-tiny", backend="linear-ctc", hardware="cpu"), registry)
    assert resolved.division["division"] == "closed"


def test_the_documented_workload_plugin_works_through_its_entry_point(tmp_path):
    blocks = _workload_doc_blocks()
    site = tmp_path / "site"
    package = site / "my_workloads"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(blocks["python"])
    (package / "ds2-tiny.yaml").write_text(blocks["yaml"])
    entry_point = re.search(r"^(\S+) = \"(\S+)\"$", blocks["toml"], re.M)
    info = site / "my_workloads-1.0.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: my-workloads\nVersion: 1.0\n")
    info.joinpath("entry_points.txt").write_text(f"[benchbase]\n{entry_point[1]} = {entry_point[2]}\n")
    env = {"PYTHONPATH": str(site), "COLUMNS": "250", "BENCHBASE_LOAD_PLUGINS": f"{entry_point[1]},torch"}
    listed = run_benchbase("workloads", env=env)
    assert listed.returncode == 0 and "ds2-tiny" in listed.stdout, listed.stderr
    planned = run_benchbase("run", "--workload", "ds2-tiny", "--backend", "torch", "--hw", "cpu", "--dry-run",
                            env=env)
    assert planned.returncode == 0, planned.stderr
    assert "ds2-tiny, closed division" in planned.stdout
