"""benchmarks/standalone_conformer.py times conformer-mini in each framework alone: its shapes
must stay the registered workload's, and it must stay free of benchbase's code."""

from __future__ import annotations

import ast
import importlib.util
import types

from benchmark_scripts import BENCHMARKS

STANDALONE = BENCHMARKS / "standalone"
FRAMEWORK_MODULES = {"torch", "tensorflow", "keras", "jax", "optax"}


def _shapes() -> types.ModuleType:
    """standalone/conformer_mini.py, which imports no framework (``test_..._import_no_framework``)."""
    spec = importlib.util.spec_from_file_location("standalone_conformer_mini", STANDALONE / "conformer_mini.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _imported(tree: ast.AST) -> set[str]:
    """The top-level package of every import in ``tree``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_shapes_are_conformer_minis(registry):
    shapes = _shapes()
    workload = registry.workload("conformer-mini")
    model, optimizer = workload.model, workload.optimizer
    expected = {
        "ENCODER_DIM": model.encoder_dim, "ATTENTION_HEADS": model.attention_heads,
        "ENCODER_LAYERS": model.encoder_layers, "FEED_FORWARD_EXPANSION": model.feed_forward_expansion,
        "CONV_KERNEL_SIZE": model.conv_kernel_size, "SUBSAMPLING_LAYERS": model.subsampling_layers,
        "DROPOUT": model.dropout, "SYMBOLS": model.symbols, "BLANK": model.ctc_blank_index,
        "LAYERNORM_EPSILON": model.layernorm_epsilon, "BATCHNORM_MOMENTUM": model.batchnorm_momentum,
        "BATCHNORM_EPSILON": model.batchnorm_epsilon, "MAX_TIMESCALE": model.max_timescale,
        "FEATURES": workload.features.dimension,
        "LEARNING_RATE": optimizer.learning_rate, "BETA1": optimizer.beta1, "BETA2": optimizer.beta2,
        "EPSILON": optimizer.epsilon, "WEIGHT_DECAY": optimizer.weight_decay,
        "CLIP_NORM": optimizer.gradient_clip_norm,
        "BATCH": registry.profile("cpu").pipeline.global_batch,
    }
    assert optimizer.name == "adamw"
    assert {name: getattr(shapes, name) for name in expected} == expected
    assert shapes.PROJECTED == model.subsampled_bins(shapes.FEATURES) * model.encoder_dim
    assert shapes.subsampled(shapes.FRAMES) == model.output_frames(shapes.FRAMES)


def test_the_random_batch_fits_ctc():
    shapes = _shapes()
    batch = shapes.random_batch(0)
    assert batch.features.shape == (shapes.BATCH, shapes.FRAMES, shapes.FEATURES)
    assert batch.output_lengths.max() == shapes.subsampled(shapes.FRAMES)
    assert (batch.label_lengths >= 1).all() and (2 * batch.label_lengths <= batch.output_lengths).all()


def test_the_script_and_its_shapes_import_no_framework():
    """So that the shapes load without a framework, and each framework only when asked for."""
    for path in (BENCHMARKS / "standalone_conformer.py", STANDALONE / "conformer_mini.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = ast.Module(body=[node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)],
                               type_ignores=[])
        assert not _imported(top_level) & FRAMEWORK_MODULES, path.name


def test_no_benchbase_code():
    """A standalone reproduction: each framework alone, not benchbase's backends nor its core."""
    for path in [BENCHMARKS / "standalone_conformer.py", *sorted(STANDALONE.glob("*.py"))]:
        imported = _imported(ast.parse(path.read_text(encoding="utf-8")))
        assert not {name for name in imported if name.startswith("benchbase")}, path.name
