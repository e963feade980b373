"""The run's replay of its first training step (benchbase.harness.optimizer_replay): a backend that
trains ds2-mini with another optimizer setting than the workload's stops before its first
evaluation, in one line naming the setting, and its log records the replay that disagreed.

The planted fault is the conformance kit's (tests/test_optimizer_rule.py): the PyTorch backend
building AdaDelta with PyTorch's defaults, rho 0.9 and epsilon 1e-6, where ds2-mini pins 0.95 and
1e-8. The run stops after its first step: a few seconds.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from benchbase_torch_ds2.backend import TorchBackend  # noqa: E402
from cli_helpers import benchbase_in_process  # noqa: E402
from test_plugins import install_fake_plugin  # noqa: E402

from benchbase.specs.optimizer import AdaDeltaSpec  # noqa: E402


class AdaDeltaWithTorchDefaults(TorchBackend):
    """The PyTorch backend whose AdaDelta ignores the spec's rho and epsilon."""

    name = "adadelta-torch-defaults"
    capabilities = dataclasses.replace(TorchBackend.capabilities, optimizers=frozenset({"adadelta", "sgd"}))

    def build(self, context):
        super().build(context)
        if isinstance(context.optimizer, AdaDeltaSpec):
            parameters = [p for p in self.network.parameters() if p.requires_grad]
            self.optimizer = torch.optim.Adadelta(parameters, lr=context.optimizer.learning_rate)  # rho 0.9, eps 1e-6


def _events(run: Path) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in (run / "mllog.log").read_text().splitlines()]


def test_a_run_training_with_another_rho_stops_after_its_first_step_in_one_line_naming_it(
        small_store, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("BENCHBASE_DEBUG", raising=False)
    monkeypatch.delenv("BENCHBASE_LOAD_PLUGINS", raising=False)
    install_fake_plugin(monkeypatch, "planted-optimizer", "planted_optimizer_benchbase_plugin", "register_backends",
                        AdaDeltaWithTorchDefaults)
    out = tmp_path / "run"
    code, _, stderr = benchbase_in_process(
        capsys, "run", "--workload", "ds2-mini", "--backend", AdaDeltaWithTorchDefaults.name, "--hw", "cpu",
        "--data", str(small_store), "--out", str(out), "--seed", "0", "--max-epochs", "1", "--no-final-eval")
    assert code != 0
    [line] = stderr.strip().splitlines()
    assert line.startswith("benchbase: error: ") and "Traceback" not in stderr
    assert line.startswith("benchbase: error: the optimizer step is not the workload's: adadelta: after step 1, "), line
    assert line.endswith("it trains with PyTorch's defaults (rho 0.9, epsilon 1e-06) instead of the spec's"), line
    events = _events(out)
    [replay] = [event for event in events if event["key"] == "benchbase_optimizer_replay"]
    assert replay["value"]["agree"] is False and line.endswith(replay["value"]["error"])
    assert not {"eval_start", "eval_accuracy"} & {event["key"] for event in events}  # before its first evaluation
    [stop] = [event for event in events if event["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted" and "rho 0.9" in stop["metadata"]["error"]
