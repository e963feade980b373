"""benchmarks/standalone_ds2.py: framework code alone, at ds2-mini's shapes as the registry has them."""

from __future__ import annotations

import ast
import subprocess
import sys

from benchmark_scripts import BENCHMARKS, load_benchmark

from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

FRAMEWORK_MODULES = ("torch", "tensorflow", "keras", "jax", "jaxlib")


def test_the_shapes_are_ds2_minis():
    script = load_benchmark("standalone_ds2")
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    workload = registry.workload("ds2-mini")
    model = workload.model
    assert script.BATCH == registry.profile("cpu").pipeline.global_batch
    assert script.FEATURES == workload.features.dimension
    assert (script.CONV_CHANNELS, script.CONV_WIDTH, script.CONV_STRIDE) == (
        model.conv_channels, model.conv_width, model.conv_stride)
    assert (script.LSTM_LAYERS, script.LSTM_UNITS) == (model.lstm_layers, model.lstm_units)
    assert script.OUTPUT_FRAMES == model.output_frames(script.FRAMES)
    assert 0 < script.FRAMES * workload.features.hop / workload.features.sample_rate <= workload.data.max_duration


def test_the_rnnt_shapes_are_rnnt_minis():
    script = load_benchmark("standalone_ds2")
    workload = collect_registry(get_plugin_manager(load_entrypoints=False)).workload("rnnt-mini")
    model = workload.model
    assert script.FEATURES == workload.features.dimension
    assert script.RNNT_INPUT_STACK == model.input_stack == model.input_subsample
    assert script.RNNT_TIME_STACK == model.stack_time_factor
    assert (script.RNNT_ENCODER_UNITS, script.RNNT_EMBEDDING, script.RNNT_PREDICTION_UNITS) == (
        model.encoder_units, model.prediction_embedding, model.prediction_units)
    assert (model.encoder_pre_layers, model.encoder_post_layers, model.prediction_layers) == (1, 1, 1)
    assert script.RNNT_ENCODER_FRAMES == model.output_frames(script.FRAMES)


def test_it_imports_no_benchbase_code_and_no_framework_until_it_runs():
    tree = ast.parse((BENCHMARKS / "standalone_ds2.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.split(".")[0].startswith("benchbase")}
    # Its constants load without any framework (this interpreter may hold one already: a fresh one).
    path = str(BENCHMARKS / "standalone_ds2.py")
    probe = ("import importlib.util, sys\n"
             f"spec = importlib.util.spec_from_file_location('standalone_ds2', {path!r})\n"
             "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
             f"print(sorted(name for name in sys.modules if name.split('.')[0] in {FRAMEWORK_MODULES!r}))\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
