"""A model family from a plugin outside the tree, end to end: `benchbase run`, `check` and `verify`.

The plugin (written below into a temporary site folder with a dist-info entry point, as pip
would install it) brings a family of its own, linear-ctc: the features through one dense
layer and a log-softmax over the symbols, per frame, trained with CTC. It brings the family's
spec, its parts (weight layout, NumPy reference, rounding bound, evaluation head, and an
int8-emulated quantized reference), a PyTorch backend for it (int8-emulated too) and a workload
of it on the synthetic corpus (docs/writing-a-workload.md, "A new model family from a plugin").
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Literal

import pytest
from cli_helpers import run_benchbase

from benchbase.kit.conformance import PRECISION_RULE_SETS
from benchbase.specs import model as model_specs

FAMILY = "linear-ctc"
BACKEND = "linear-ctc-torch"
WORKLOAD = "linear-ctc-mini"

SPEC = '''
"""The linear-ctc family's spec: features -> dense -> log-softmax over the symbols, per frame, CTC."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from benchbase.specs.model import ModelSpec


class LinearCTCModelSpec(ModelSpec):
    family: Literal["linear-ctc"] = Field("linear-ctc", description="One dense layer per frame, trained with CTC.")
    ctc_blank_index: int = Field(0, ge=0, description="Index of the CTC blank in the output alphabet.")
    ctc_impossible_alignments: Literal["zero"] = Field(
        "zero", description="An utterance CTC cannot align adds zero loss and zero gradient.")
    init: Literal["xavier_uniform"] = Field("xavier_uniform", description="Xavier-uniform kernel, zero bias.")

    parts_module = "linear_ctc_family.parts"
    quantizable_tensors = ("output.input", "output.kernel")  # int8-emulated: the dense layer's input and kernel

    @model_validator(mode="after")
    def _blank_inside_alphabet(self):
        if self.ctc_blank_index >= self.symbols:
            raise ValueError(f"ctc_blank_index {self.ctc_blank_index} is outside the {self.symbols} symbols")
        return self

    @property
    def blank_index(self) -> int:
        return self.ctc_blank_index

    def output_frames(self, input_frames):
        if isinstance(input_frames, np.ndarray):
            return input_frames.astype(np.int32)
        return int(input_frames)

    def input_frames_for(self, output_frames: int) -> int:
        return output_frames

    def keeps_utterance(self, input_frames: int, labels: int) -> bool:
        return input_frames >= labels

    def store_shaping(self) -> dict[str, object]:
        return {"output_frames": "input_frames"}

    def parameter_count(self, feature_dimension: int) -> int:
        return feature_dimension * self.symbols + self.symbols
'''

PARTS = '''
"""The linear-ctc family's parts: predict() returns CTC log-probabilities, decoded as ds2's are."""
from __future__ import annotations

import numpy as np

from benchbase.families.ctc import CTCParts, bounded_ctc_step
from benchbase.families.layout import check_against_layout
from benchbase.families.parts import KitModel
from benchbase.numerics.quantization import fake_quantize_activation, fake_quantize_weight, is_quantized
from benchbase.numerics.rounded import RoundedArithmetic
from benchbase.numerics.tolerances import rounding_bound
from benchbase.specs.optimizer import AdaDeltaSpec

from linear_ctc_family.spec import LinearCTCModelSpec

RANGE = "output.input_range"


def quantizes(model, tensor):
    return is_quantized(model) and model.quantization.quantizes(tensor)


def weight_layout(model, feature_dimension):
    layout = {"output.kernel": (feature_dimension, model.symbols), "output.bias": (model.symbols,)}
    return layout | ({RANGE: ()} if quantizes(model, "output.input") else {})


def forward(weights, model, features, rounded, training=False):
    """float64 log-probabilities, every operation moved by ``rounded``'s bound (none: exact), and
    the ranges the pass leaves (int8-emulated fake-quantizes the input and the kernel first)."""
    kernel, bias = (np.asarray(weights[name], np.float64) for name in ("output.kernel", "output.bias"))
    x, running = np.asarray(features, np.float64), {}
    if quantizes(model, "output.input"):
        quantized, value_range = fake_quantize_activation(features, weights[RANGE], model.quantization, training)
        x, running[RANGE] = quantized.astype(np.float64), np.asarray(value_range, np.float64)
    if quantizes(model, "output.kernel"):
        kernel = fake_quantize_weight(weights["output.kernel"], model.quantization).astype(np.float64)
    logits = rounded.dot(x, kernel, bias)
    shifted = rounded.function(logits - logits.max(axis=-1, keepdims=True))
    total = rounded.sum(rounded.function(np.exp(shifted)), axis=-1)
    return rounded.function(shifted - rounded.function(np.log(total))[..., None]), running


class LinearCTCQuantizedReference:  # what the kit's int8-emulated rules need beside the parts
    def range_names(self, model):
        return [RANGE] if quantizes(model, "output.input") else []

    def quantized_kernels(self, weights, model):
        if not quantizes(model, "output.kernel"):
            return dict(weights)
        return dict(weights) | {"output.kernel": fake_quantize_weight(weights["output.kernel"], model.quantization)}


class LinearCTCParts(CTCParts):  # the CTC head, the output width and the impossible cut are every CTC family's
    quantized_reference = LinearCTCQuantizedReference()

    def weight_layout(self, model, feature_dimension):
        return weight_layout(model, feature_dimension)

    def validate_weights(self, weights, model, feature_dimension):
        check_against_layout(weights, weight_layout(model, feature_dimension))

    def reference_outputs(self, weights, model, features, feature_lengths):
        return forward(weights, model, features, RoundedArithmetic(None))[0]

    def bounded_outputs(self, weights, model, features, feature_lengths, operand_roundoff, draws):
        exact, bound = rounding_bound(lambda rounding: {"log_probs": forward(weights, model, features,
                                                                             RoundedArithmetic(rounding))[0]},
                                      draws=draws, operand_roundoff=operand_roundoff)
        return exact["log_probs"], bound["log_probs"]

    # What the conformance kit needs to prove a backend of the family.

    def random_weights(self, model, feature_dimension, seed):
        rng, limit = np.random.default_rng(seed), np.sqrt(6.0 / (feature_dimension + model.symbols))
        weights = {"output.kernel": rng.uniform(-limit, limit, (feature_dimension, model.symbols)).astype(np.float32),
                   "output.bias": rng.normal(0.0, 0.1, model.symbols).astype(np.float32)}
        ranges = self.quantized_reference.range_names(model)  # drawn last: fp32's weights stay as they were
        return weights | {name: np.float32(rng.uniform(1.0, 4.0)) for name in ranges}

    def reference_step(self, weights, model, batch):
        return bounded_ctc_step(lambda rounding: forward(weights, model, batch.features, RoundedArithmetic(rounding),
                                                         training=True), batch, model.blank_index)

    def normalization_layers(self, model):
        return []

    def kit_model(self):
        return KitModel(LinearCTCModelSpec(), AdaDeltaSpec(learning_rate=1.0, rho=0.95, epsilon=1e-8))


PARTS = LinearCTCParts()
'''

TORCH_BACKEND = '''
"""A PyTorch backend of the linear-ctc family, written against benchbase's Backend contract."""
from __future__ import annotations

import math

import numpy as np
import torch

from benchbase.backend import Backend, Capabilities
from benchbase.errors import BenchbaseError
from benchbase.numerics.quantization import fake_quantize_activation, fake_quantize_weight
from linear_ctc_family.parts import PARTS, RANGE, quantizes


class LinearCTCTorchBackend(Backend):
    name = "linear-ctc-torch"
    description = "PyTorch: the linear-ctc family (CTC, AdaDelta) on CPUs"
    capabilities = Capabilities(families=frozenset({"linear-ctc"}), precisions=frozenset({"fp32", "int8-emulated"}))

    def build(self, context):
        if context.plan.threads:  # the kit's thread_budget rule holds a backend to the plan's threads
            torch.set_num_threads(context.plan.threads)
            try:
                torch.set_num_interop_threads(context.plan.threads)
            except RuntimeError:
                pass  # fixed once PyTorch has run parallel work in this process
        self.model, self.optimizer_spec, self.steps = context.model, context.optimizer, 0
        self.input_range = np.float32(0.0)  # int8-emulated's moving-average range of the input
        self.feature_dimension = context.feature_dimension
        generator = torch.Generator().manual_seed(context.seed)
        inputs, symbols = context.feature_dimension, context.model.symbols
        limit = math.sqrt(6.0 / (inputs + symbols))  # Xavier-uniform over the whole kernel
        self.kernel = torch.nn.Parameter((torch.rand(inputs, symbols, generator=generator) * 2 - 1) * limit)
        self.bias = torch.nn.Parameter(torch.zeros(symbols))
        spec = context.optimizer
        self.optimizer = torch.optim.Adadelta([self.kernel, self.bias], lr=spec.learning_rate, rho=spec.rho,
                                              eps=spec.epsilon)

    def _log_probs(self, features, training=False):
        return torch.log_softmax(self._input(features, training) @ self._kernel() + self.bias, dim=-1)

    def _input(self, features, training):
        if not quantizes(self.model, "output.input"):
            return torch.from_numpy(features)
        quantized, value_range = fake_quantize_activation(features, self.input_range, self.model.quantization,
                                                          training)
        self.input_range = value_range
        return torch.from_numpy(quantized)

    def _kernel(self):
        if not quantizes(self.model, "output.kernel"):
            return self.kernel
        quantized = torch.from_numpy(fake_quantize_weight(self.kernel.detach().numpy(), self.model.quantization))
        return quantized + (self.kernel - self.kernel.detach())  # straight-through: the quantized values, k's gradient

    def train_step(self, batch):
        for group in self.optimizer.param_groups:
            group["lr"] = self.optimizer_spec.learning_rate_at(self.steps)
        log_probs = self._log_probs(batch.features, training=True)
        loss = torch.nn.functional.ctc_loss(
            log_probs.transpose(0, 1), torch.from_numpy(batch.labels).long(),
            torch.from_numpy(batch.output_lengths).long(), torch.from_numpy(batch.label_lengths).long(),
            blank=self.model.blank_index, reduction="sum", zero_infinity=True) / batch.size
        self.optimizer.zero_grad()
        loss.backward()
        if self.optimizer_spec.gradient_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_([self.kernel, self.bias], self.optimizer_spec.gradient_clip_norm)
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())

    def predict(self, inputs):
        with torch.no_grad():
            return self._log_probs(inputs.features).numpy()

    def save_checkpoint(self, path):
        torch.save({"kernel": self.kernel.detach(), "bias": self.bias.detach(), "steps": self.steps,
                    "optimizer": self.optimizer.state_dict(), "input_range": float(self.input_range)}, path)

    def load_checkpoint(self, path):
        try:
            state = torch.load(path)
            with torch.no_grad():
                self.kernel.copy_(state["kernel"])
                self.bias.copy_(state["bias"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.steps, self.input_range = int(state["steps"]), np.float32(state["input_range"])
        except Exception as error:
            raise BenchbaseError(f"{path}: not a linear-ctc-torch checkpoint ({type(error).__name__})") from None

    def parameter_count(self):
        return self.kernel.numel() + self.bias.numel()

    def export_weights(self):
        weights = {"output.kernel": self.kernel.detach().numpy().copy(),
                   "output.bias": self.bias.detach().numpy().copy()}
        return weights | ({RANGE: np.asarray(self.input_range, np.float32)} if RANGE in self._layout() else {})

    def import_weights(self, weights):
        PARTS.validate_weights(weights, self.model, self.feature_dimension)
        with torch.no_grad():
            self.kernel.copy_(torch.from_numpy(weights["output.kernel"]))
            self.bias.copy_(torch.from_numpy(weights["output.bias"]))
        if RANGE in weights:
            self.input_range = np.float32(weights[RANGE])

    def _layout(self):
        return PARTS.weight_layout(self.model, self.feature_dimension)


class DropsTheBiasInPredict(LinearCTCTorchBackend):
    """A planted fault: predict() leaves out the output bias that training uses."""

    name = "linear-ctc-torch-nobias"

    def predict(self, inputs):
        with torch.no_grad():
            return torch.log_softmax(torch.from_numpy(inputs.features) @ self.kernel, dim=-1).numpy()


class NeverUpdatesTheRange(LinearCTCTorchBackend):
    """A planted int8 fault: training quantizes the input as inference does, leaving the range as it was."""

    name = "linear-ctc-torch-fixed-range"

    def _input(self, features, training):
        return super()._input(features, training=False)
'''

PLUGIN = '''
"""The entry point: importing it defines the family (its spec), the hooks register the rest."""
from importlib import resources

from benchbase import hookimpl
from benchbase.backend import BackendReference
from benchbase.specs import WorkloadSpec
from benchbase.specs.yaml_files import load_spec_text

import linear_ctc_family.spec  # noqa: F401  (defining the spec class registers the family)


@hookimpl
def register_backends(register):
    register(BackendReference("linear-ctc-torch", "linear_ctc_family.torch_backend:LinearCTCTorchBackend"))
    register(BackendReference("linear-ctc-torch-nobias", "linear_ctc_family.torch_backend:DropsTheBiasInPredict"))
    register(BackendReference("linear-ctc-torch-fixed-range", "linear_ctc_family.torch_backend:NeverUpdatesTheRange"))


@hookimpl
def register_workloads(register):
    item = resources.files("linear_ctc_family") / "linear-ctc-mini.yaml"
    register(load_spec_text(WorkloadSpec, item.read_text(encoding="utf-8"), "linear_ctc_family/linear-ctc-mini.yaml"))
'''

WORKLOAD_YAML = '''
name: linear-ctc-mini
description: One dense layer per frame, trained with CTC, on the synthetic corpus (a plugin's family).
reference: none; a model family from a plugin, end to end
model:
  family: linear-ctc
data:
  dataset: synthetic
  train: [train]
  dev: [dev-clean, dev-other]
  test: [test-clean, test-other]
  max_duration: 16.7
  synthetic_utterances: 3000
evaluation:
  every_epochs: 1
  decoder: greedy
  beam_width: 1
tta:
  subset: dev-clean
  window: 1
  targets:
    - {metric: paper_cer, value: 20}
max_epochs: 2
max_minutes: 5
'''


def install_plugin(site: Path) -> dict[str, str]:
    """The plugin as pip would install it into ``site``; the environment a subprocess finds it with."""
    package = site / "linear_ctc_family"
    package.mkdir(parents=True)
    files = {"__init__.py": "", "spec.py": SPEC, "parts.py": PARTS, "torch_backend.py": TORCH_BACKEND,
             "plugin.py": PLUGIN, f"{WORKLOAD}.yaml": WORKLOAD_YAML}
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    info = site / "linear_ctc_family-1.0.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: linear-ctc-family\nVersion: 1.0\n")
    info.joinpath("entry_points.txt").write_text(f"[benchbase]\n{FAMILY} = linear_ctc_family.plugin\n")
    return {"PYTHONPATH": str(site), "BENCHBASE_LOAD_PLUGINS": FAMILY, "COLUMNS": "250"}


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory, small_store) -> tuple[Path, dict[str, str]]:
    """A finished run of the plugin's workload with the plugin's backend, and the plugin's environment."""
    root = tmp_path_factory.mktemp("family-plugin")
    env = install_plugin(root / "site")
    run_dir = root / "run"
    ran = run_benchbase("run", "--workload", WORKLOAD, "--backend", BACKEND, "--hw", "cpu", "--data", str(small_store),
                        "--out", str(run_dir), "--seed", "3", env=env)
    assert ran.returncode in (0, 3), ran.stderr  # 3: stopped at max_epochs before the target (status aborted)
    return run_dir, env


@pytest.mark.slow
def test_a_plugins_family_trains_evaluates_and_is_scored_independently(plugin_run):
    run_dir, _ = plugin_run
    result = json.loads((run_dir / "result.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    assert config["workload"]["model"]["family"] == FAMILY and config["backend"] == BACKEND
    assert result["status"] in ("success", "aborted") and result["epochs"] >= 1
    assert result["parameter_count"] == 93 * 30 + 30  # the spec's count: 80 log-mels + 13 MFCCs, 30 symbols
    independent = result["final_evaluation"]["independent"]
    assert independent["agree"], independent  # the family's NumPy reference re-scored predict() from the weights


@pytest.mark.slow
def test_check_holds_the_run_to_the_workload_the_plugin_registers(plugin_run):
    run_dir, env = plugin_run
    checked = run_benchbase("check", str(run_dir), env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1/1 log(s) pass" in checked.stdout


@pytest.mark.slow
def test_verify_rescores_the_final_weights_with_the_familys_reference(plugin_run):
    run_dir, env = plugin_run
    verified = run_benchbase("verify", str(run_dir), env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "independent: re-scored by the reference model" in verified.stdout
    assert f"{run_dir}: verified against" in verified.stdout


@pytest.mark.slow
def test_without_the_plugin_a_run_of_its_family_is_one_line_naming_the_family(plugin_run):
    run_dir, _ = plugin_run
    verified = run_benchbase("verify", str(run_dir), env={"BENCHBASE_LOAD_PLUGINS": ""})
    assert verified.returncode == 2
    assert verified.stderr.splitlines() == [
        f"benchbase: error: {run_dir / 'config.json'}: workload.model: Value error, model family 'linear-ctc' is "
        f"unknown (known: {', '.join(model_specs.model_families())}): no installed plugin defines it; install the "
        "plugin that brings it"]


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    """The plugin installed (no run), and the environment a subprocess finds it with."""
    return install_plugin(tmp_path_factory.mktemp("family-plugin-kit") / "site")


def test_the_conformance_kit_proves_a_backend_of_a_plugins_family(plugin_env):
    proved = run_benchbase("backend-test", BACKEND, "--json", env=plugin_env)
    assert proved.returncode == 0, proved.stdout + proved.stderr
    report = json.loads(proved.stdout)
    assert report["families"] == [FAMILY] and report["passed"]
    names = [rule["rule"] for rule in report["rules"]]
    assert "forward_parity" in names and "loss" in names and "batchnorm_statistics" not in names  # no BatchNorm


def test_a_fault_planted_in_a_plugins_backend_fails_the_rule_that_covers_it(plugin_env):
    faulty = run_benchbase("backend-test", "linear-ctc-torch-nobias", "--family", FAMILY, "--json",
                           "--rule", "forward_parity", "--rule", "loss", env=plugin_env)
    assert faulty.returncode == 1, faulty.stdout + faulty.stderr
    results = {rule["rule"]: rule for rule in json.loads(faulty.stdout)["rules"]}
    assert not results["forward_parity"]["passed"] and "differs from the reference" in results["forward_parity"][
        "message"]
    assert results["loss"]["passed"], results["loss"]["message"]  # training uses the bias: the loss is right


def test_the_kit_proves_a_plugins_family_in_int8_emulated_through_its_quantized_reference(plugin_env):
    proved = run_benchbase("backend-test", BACKEND, "--family", FAMILY, "--precision", "int8-emulated", "--json",
                           env=plugin_env)
    assert proved.returncode == 0, proved.stdout + proved.stderr
    report = json.loads(proved.stdout)
    assert report["families"] == [FAMILY] and report["passed"]
    assert [rule["rule"] for rule in report["rules"]] == [rule.name for rule in PRECISION_RULE_SETS["int8-emulated"]]


def test_the_int8_rules_fail_a_plugins_backend_that_never_updates_its_range(plugin_env):
    # Inference reads the stored range, so the forward rule cannot see it; the ranges a step leaves do.
    faulty = run_benchbase("backend-test", "linear-ctc-torch-fixed-range", "--family", FAMILY, "--precision",
                           "int8-emulated", "--json", "--rule", "int8_forward", "--rule", "int8_training_step",
                           env=plugin_env)
    assert faulty.returncode == 1, faulty.stdout + faulty.stderr
    results = {rule["rule"]: rule for rule in json.loads(faulty.stdout)["rules"]}
    assert results["int8_forward"]["passed"], results["int8_forward"]["message"]
    assert not results["int8_training_step"]["passed"]
    assert "output.input_range is" in results["int8_training_step"]["message"]


def test_an_unknown_family_asks_the_family_sources_and_names_what_they_skipped(monkeypatch):
    """What the plugin host's source does for `verify` above, with a source of this test's own."""
    monkeypatch.setattr(model_specs, "_FAMILIES", dict(model_specs._FAMILIES))  # the classes below stay here
    asked = []

    def source() -> list[str]:
        asked.append(len(asked))

        class FromSource(model_specs.ModelSpec):
            family: Literal["from-source"] = "from-source"

        with pytest.raises(ValueError, match="'not-yet' is unknown"):  # asked from inside a source: no recursion
            model_specs.model_spec_class("not-yet")
        return ["plugin 'broken' (broken-dist) skipped: ImportError: no module"]

    monkeypatch.setattr(model_specs, "_FAMILY_SOURCES", [source])
    assert model_specs.model_spec_class("from-source").__name__ == "FromSource" and asked == [0]
    assert model_specs.model_spec_class("from-source").__name__ == "FromSource" and asked == [0]  # defined now
    with pytest.raises(ValueError) as unknown:
        model_specs.validate_model({"family": "nowhere"})
    assert str(unknown.value) == (
        f"model family 'nowhere' is unknown (known: {', '.join(model_specs.model_families())}): no installed plugin "
        "defines it; install the plugin that brings it; plugin 'broken' (broken-dist) skipped: ImportError: no module")
    assert asked == [0, 1]
