"""ModelSpec: what every model family's spec shares, and the registry that picks a family by name.

A workload's ``model`` names its family (``family: ds2``, ``family: rnnt``; a spec without the key
is DS2, as every spec was before families existed). Each family's spec is a subclass of
``ModelSpec`` that lives in the family's package and registers itself when its class is
defined. Specs are data: the registry maps a name to a class, nothing more.

A family brought by a plugin is defined when the plugin's entry-point module is imported (it
imports its spec). Every command that collects the registry imports the plugins first, but a
workload is also read where no registry is needed (config.json, by `benchbase verify`,
`decode-sweep` and `run --resume`), so a name that is neither defined nor benchbase's own makes
``model_spec_class`` ask its family sources before it calls the family unknown: the plugin host
adds one that imports the installed plugins (entry points, as ``BENCHBASE_LOAD_PLUGINS``
allows). Specs import no plugin code themselves.

What is common to every family is what the harness reads without knowing the family: the
number of output symbols and the blank among them, the precision, the quantization scheme,
the output-length rule (``output_frames``) and the parameter count. The rest (layer sizes,
the loss's conventions) are the family's own fields.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, overload

import numpy as np
from pydantic import Field, field_validator

from benchbase.specs._base import Spec

__all__ = [
    "GPU_ONLY_PRECISIONS",
    "PRECISIONS",
    "ModelSpec",
    "Precision",
    "QuantizationSpec",
    "add_family_source",
    "builtin_family_specs",
    "model_families",
    "model_spec_class",
    "validate_model",
]

Precision = Literal["fp32", "tf32", "bf16", "fp16", "int8-emulated"]
"""The one list of arithmetic precisions: the spec validates with it, the CLI and the harness read it."""
PRECISIONS: tuple[str, ...] = get_args(Precision)
GPU_ONLY_PRECISIONS: tuple[str, ...] = ("tf32", "fp16")
"""Precisions that exist only on GPU tensor cores: a CPU run of them is refused before the clock starts
(TF32 is a tensor-core format; fp16 on a CPU would be emulated and slower than fp32, so it measures nothing)."""

PRECISION_DESCRIPTION = (
    "Arithmetic of training and evaluation. fp32: true IEEE float32 (no TF32 matmuls). tf32 (GPUs only): "
    "float32 with TF32 tensor-core matmuls and convolutions. bf16: automatic mixed precision, bfloat16 compute "
    "with float32 master weights, normalization statistics and loss. fp16 (GPUs only): the same with float16 "
    "and dynamic loss scaling. int8-emulated: float32 arithmetic on fake-quantized weights and activations as "
    "`quantization` pins (an 8-bit accelerator's numbers, emulated).")


class QuantizationSpec(Spec):
    """How ``precision: int8-emulated`` fake-quantizes the model: the one statement of the scheme.

    Every backend implements exactly this; its float32 functions are shared
    (``benchbase.numerics.quantization``), and each family with int8-emulated says where it
    quantizes in its package (``benchbase.families.ds2.quantization`` for DS2). A fake-quantized tensor is
    ``clip(round(x / scale), -qmax, qmax) * scale`` with ``qmax = 2 ** (bits - 1) - 1``
    (symmetric, so at most 2 ** bits - 1 distinct values, zero exact), rounding half to even,
    computed in float32. Biases, normalization, the gates' nonlinearities, the cell state, the
    log-softmax and the loss stay float32, as on an accelerator with 32-bit accumulators.
    """

    bits: int = Field(8, ge=2, le=8, description="Bits of every fake-quantized tensor.")
    weights: Literal["symmetric_per_tensor_max"] = Field(
        "symmetric_per_tensor_max",
        description="A weight matrix's scale is max|W| / qmax over the whole tensor, from the float32 master "
        "weight at every forward pass (nothing is clipped).")
    activations: Literal["symmetric_per_tensor_moving_average"] = Field(
        "symmetric_per_tensor_moving_average",
        description="An input activation's scale is range / qmax, range a moving average of the batch's "
        "max|x| (every element of the tensor as the layer receives it: padded frames and dropout included, a "
        "backend's own extra padding excluded). Training: the first step sets range = max|x|, later steps "
        "range = momentum * range + (1 - momentum) * max|x|, and the step quantizes with the updated range. "
        "Inference quantizes with the stored range (max|x| of the batch while it is still 0). Values beyond "
        "the range saturate at +-qmax. Each range is model state, like BatchNorm's running statistics: "
        "checkpointed, and in the neutral weight layout as '<layer>.input_range'.")
    range_momentum: float = Field(
        0.99, gt=0.0, lt=1.0,
        description="Share of the old activation range kept per training step (Keras's convention, as "
        "batchnorm_momentum).")
    recurrent_state_range: float = Field(
        1.0, gt=0.0, le=16.0,
        description="Fixed range of an LSTM's h(t-1) entering the recurrent matmul: h = o * tanh(c) lies in "
        "(-1, 1) by construction, so it needs no statistics (an accelerator's static range).")
    gradient: Literal["straight_through"] = Field(
        "straight_through",
        description="The backward pass treats fake quantization as the identity inside the range and as zero "
        "where an activation saturated (clip's gradient); scales and ranges get no gradient.")
    tensors: tuple[str, ...] | None = Field(
        None, min_length=1,
        description="The tensors fake-quantized in the forward pass, by the family's names (`benchbase "
        "workloads --show` lists them); none: every tensor the family can quantize, each layer's input "
        "activation and its weight matrix. The model spec writes the full list in.")

    @property
    def qmax(self) -> int:
        return int(2 ** (self.bits - 1)) - 1

    def quantizes(self, tensor: str) -> bool:
        """Whether ``tensor`` (one of the family's quantizable tensors) is fake-quantized."""
        return self.tensors is None or tensor in self.tensors


_FAMILIES: dict[str, type[ModelSpec]] = {}


class ModelSpec(Spec):
    """The part of a model spec every family has; a family's spec subclasses it.

    A subclass declares ``family: Literal["name"] = "name"`` and ``quantizable_tensors``, and
    implements ``blank_index``, ``output_frames`` and ``parameter_count``. Defining the class
    registers the family.
    """

    family: str = Field(description="Model family: which architecture the other fields describe.")
    symbols: int = Field(30, ge=2, le=1024, description="Output symbols including the blank.")
    precision: Precision = Field("fp32", description=PRECISION_DESCRIPTION)
    quantization: QuantizationSpec = Field(
        default_factory=QuantizationSpec, validate_default=True,
        description="The fake-quantization scheme of precision int8-emulated (ignored by the other precisions).")

    quantizable_tensors: ClassVar[tuple[str, ...]] = ()
    """Every tensor of the family that ``int8-emulated`` can fake-quantize, by name (none: the family
    has no int8-emulated, and ``quantization.tensors`` stays None)."""
    evaluation_decoders: ClassVar[tuple[str, ...] | None] = None
    """The evaluation decoders (``EvalSpec.decoder``) the family's outputs can be decoded with; None: all."""
    parts_module: ClassVar[str | None] = None
    """The module whose ``PARTS`` are the family's parts (``benchbase.families.parts.family_parts``);
    None: ``benchbase.families.<family>.parts``, where benchbase's own families keep theirs. A
    plugin's family names its own module here."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        default = cls.model_fields["family"].default
        if isinstance(default, str):
            known = _FAMILIES.get(default)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise TypeError(f"model family {default!r} is defined twice ({known.__module__}, {cls.__module__})")
            _FAMILIES[default] = cls

    @field_validator("quantization", mode="after")
    @classmethod
    def _quantization_names_the_familys_tensors(cls, quantization: QuantizationSpec) -> QuantizationSpec:
        if quantization.tensors is None:
            if not cls.quantizable_tensors:  # a family with nothing to quantize keeps none (() would not read back)
                return quantization
            return quantization.model_copy(update={"tensors": cls.quantizable_tensors})
        unknown = [name for name in quantization.tensors if name not in cls.quantizable_tensors]
        if unknown:
            raise ValueError(f"quantization.tensors: {', '.join(unknown)} not among this family's "
                             f"({', '.join(cls.quantizable_tensors) or 'it has none'})")
        return quantization

    @property
    def blank_index(self) -> int:
        """Index of the blank symbol (CTC's blank, the transducer's no-emission symbol)."""
        raise NotImplementedError

    @overload
    def output_frames(self, input_frames: int) -> int: ...

    @overload
    def output_frames(self, input_frames: np.ndarray) -> np.ndarray: ...

    def output_frames(self, input_frames: int | np.ndarray) -> int | np.ndarray:
        """Frames the model's output (or encoder) has for ``input_frames`` feature frames.

        The one source of this formula: the harness computes every batch's output lengths
        with it, and backends take them from the batch. Arrays give int32 arrays; 0 means the
        utterance is too short for the model.
        """
        raise NotImplementedError

    def input_frames_for(self, output_frames: int) -> int:
        """The fewest feature frames that give ``output_frames`` output frames (the inverse of
        ``output_frames``, for data that must have an exact output length: the conformance kit's)."""
        raise NotImplementedError

    def keeps_utterance(self, input_frames: int, labels: int) -> bool:
        """Whether an utterance of ``input_frames`` feature frames and ``labels`` labels can be trained
        on: the store leaves out the others when it is prepared (a CTC model needs an output frame per
        label, a transducer one output frame)."""
        raise NotImplementedError

    def store_shaping(self) -> dict[str, object]:
        """The model settings a prepared feature store depends on (through ``keeps_utterance``): part
        of the store's key, so a store is reused only by models that keep the same utterances."""
        raise NotImplementedError

    def parameter_count(self, feature_dimension: int) -> int:
        """Trainable parameters the layer sizes imply."""
        raise NotImplementedError


def builtin_family_specs() -> list[str]:
    """The spec modules of the families benchbase ships: every ``benchbase/families/<name>/spec.py``,
    found on disk, so that a new family is its folder alone. Imported when first asked for: a
    family's package imports this module, so this module cannot import the families at its top."""
    families = Path(__file__).resolve().parent.parent / "families"
    return [f"benchbase.families.{spec.parent.name}.spec" for spec in sorted(families.glob("*/spec.py"))]


def _define_builtin_families() -> None:
    for module in builtin_family_specs():
        importlib.import_module(module)


def model_families() -> tuple[str, ...]:
    """Names of the families whose spec is defined: benchbase's own and those of imported plugins."""
    _define_builtin_families()
    return tuple(sorted(_FAMILIES))


def model_spec_class(family: str) -> type[ModelSpec]:
    """The spec class of ``family``; ``ValueError`` naming the known ones if none is defined once
    benchbase's own families are and the family sources (the installed plugins) were asked."""
    if family not in _FAMILIES:
        _define_builtin_families()
    skipped: list[str] = []
    if family not in _FAMILIES:
        skipped = _ask_family_sources()
    try:
        return _FAMILIES[family]
    except KeyError:
        more = f" (and {len(skipped) - 1} more: `benchbase plugins` lists them)" if len(skipped) > 1 else ""
        broken = f"; {skipped[0]}{more}" if skipped else ""
        raise ValueError(f"model family {family!r} is unknown (known: {', '.join(model_families())}): no installed "
                         f"plugin defines it; install the plugin that brings it{broken}") from None


FamilySource = Callable[[], list[str]]
"""Imports what may define more families; returns what it skipped (a broken plugin), one line each."""
_FAMILY_SOURCES: list[FamilySource] = []
_asking = False


def add_family_source(source: FamilySource) -> None:
    """Have ``model_spec_class`` call ``source`` before it calls a family unknown. The plugin host
    adds the installed plugins' (``benchbase.plugin_host``), so a plugin's family reads wherever a
    workload is read, with or without a registry."""
    if source not in _FAMILY_SOURCES:
        _FAMILY_SOURCES.append(source)


def _ask_family_sources() -> list[str]:
    """Every source's skipped lines. Nothing while a source runs: a plugin whose import asks for a
    family it has not defined yet must not import every plugin again from inside itself."""
    global _asking
    if _asking:
        return []
    _asking = True
    try:
        return [line for source in _FAMILY_SOURCES for line in source()]
    finally:
        _asking = False


def validate_model(value: object) -> object:
    """Turn a mapping into its family's spec (no ``family`` key: ds2); anything else passes through."""
    if isinstance(value, dict):
        family = value.get("family", "ds2")
        if not isinstance(family, str):
            raise ValueError(f"family must be a string, not {family!r}")
        return model_spec_class(family).model_validate({**value, "family": family})
    return value
