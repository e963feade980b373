"""StrategySpec: how the learners of a data-parallel run combine their work, one spec per strategy.

The paper trains one way: every step, every learner's gradient is averaged (synchronous
all-reduce, ``sync``). The work beside it asks how other ways compare by time to accuracy:
periodic model averaging (local SGD), averaging within a node and across nodes at different
rates, compressed gradients, and asynchronous decentralized SGD, where each learner averages its
weights with one peer instead of a global all-reduce. A strategy is a run choice like the
precision, not a workload change; any strategy but ``sync`` puts a run in the open division.

Each strategy is a spec class here (its parameters, bounded and described) and a
``StrategyDefinition`` (its name, the process models it runs under, how many learners it needs).
Plugins register definitions through ``register_strategies``; a backend names the strategies it
implements in its ``Capabilities``. Specs are data: how a strategy is carried out is the backend's
(docs/design.md, "Training strategies").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from benchbase.errors import InputError
from benchbase.specs._base import Spec

__all__ = [
    "BUILTIN_STRATEGIES",
    "DEFAULT_STRATEGY",
    "ADPSGDSpec",
    "BF16CompressSpec",
    "FP16CompressSpec",
    "HADPSGDSpec",
    "HierarchicalSpec",
    "LocalSGDSpec",
    "PowerSGDSpec",
    "StrategyDefinition",
    "StrategySpec",
    "SyncSpec",
    "UnknownStrategySpec",
    "check_strategy_fields",
    "communication_precision_of",
    "register_strategy_spec",
    "validate_strategy",
]

DEFAULT_STRATEGY = "sync"


class StrategySpec(Spec):
    """What every strategy's spec has: its name. Subclasses add the strategy's parameters."""

    name: str = Field(min_length=1, max_length=64, description="The strategy (sync: the paper's, the default).")
    communication_precision: ClassVar[str | None] = "fp32"
    """The lowest precision its learners communicate in (MLPerf's lowest_numerical_precision_in_comm):
    float32 gradients or weights unless the strategy casts them; None where unknown."""

    def parameters(self) -> dict[str, Any]:
        """The strategy's settings without its name, as the log and config.json record them."""
        return self.model_dump(mode="json", exclude={"name"})


class UnknownStrategySpec(StrategySpec):
    """A strategy whose plugin is not installed here: a recorded run's config still reads (and
    `benchbase check` still sees its name and parameters), but no run can use it."""

    model_config = ConfigDict(frozen=True, extra="allow")
    communication_precision: ClassVar[str | None] = None


class SyncSpec(StrategySpec):
    """Synchronous data parallelism: every step, every learner's gradient is averaged (all-reduce)."""

    name: Literal["sync"] = Field("sync", description="Gradients averaged across learners every step.")


class LocalSGDSpec(StrategySpec):
    """Post-local SGD: synchronous for ``warmup_steps``, then each learner steps on its own
    gradient and the learners' models are averaged every ``period`` steps."""

    name: Literal["local_sgd"] = Field("local_sgd", description="Periodic model averaging.")
    period: int = Field(4, ge=1, le=100_000, description="Steps between model averages (1: every step).")
    warmup_steps: int = Field(0, ge=0, le=10_000_000,
                              description="Steps trained synchronously (gradient all-reduce) before local steps begin.")


class HierarchicalSpec(StrategySpec):
    """Gradients averaged within each group of ``group_size`` learners every step (a machine's
    processes, fast links), models averaged across every learner every ``period`` steps."""

    name: Literal["hierarchical"] = Field("hierarchical", description="Two-level averaging.")
    group_size: int | None = Field(None, ge=1, le=1024,
                                   description="Learners per group; none: the processes of one machine.")
    period: int = Field(4, ge=1, le=100_000, description="Steps between averages across groups.")


class PowerSGDSpec(StrategySpec):
    """Synchronous, with each gradient bucket all-reduced as a low-rank approximation (PowerSGD,
    Vogels et al. 2019, through DDP's communication hook) and the approximation's error fed back."""

    name: Literal["powersgd"] = Field("powersgd", description="Low-rank gradient compression.")
    matrix_approximation_rank: int = Field(1, ge=1, le=64, description="Rank of the gradient approximation.")
    start_iteration: int = Field(10, ge=2, le=10_000_000,
                                 description="Steps of uncompressed all-reduce first (PowerSGD's own warm-up).")
    use_error_feedback: bool = Field(True, description="Add each step's approximation error to the next gradient.")


class FP16CompressSpec(StrategySpec):
    """Synchronous, with the gradients cast to float16 for the all-reduce (half the bytes)."""

    name: Literal["fp16_compress"] = Field("fp16_compress", description="float16 gradient all-reduce.")
    communication_precision: ClassVar[str | None] = "fp16"


class BF16CompressSpec(StrategySpec):
    """Synchronous, with the gradients cast to bfloat16 for the all-reduce (half the bytes)."""

    name: Literal["bf16_compress"] = Field("bf16_compress", description="bfloat16 gradient all-reduce.")
    communication_precision: ClassVar[str | None] = "bf16"


class ADPSGDSpec(StrategySpec):
    """Asynchronous decentralized parallel SGD (Lian et al. 2018; Zhang et al. 2019 for ASR): each
    learner steps on its own gradient while, concurrently, it exchanges its weights with one peer
    and moves halfway toward the peer's; no global all-reduce of gradients or weights."""

    name: Literal["adpsgd"] = Field("adpsgd", description="Asynchronous decentralized parallel SGD.")
    peer: Literal["ring", "random"] = Field(
        "ring", description="ring: each learner sends to the next learner and receives from the previous one; "
        "random: a ring shift drawn per step from the run's seed (the same draw on every learner).")


class HADPSGDSpec(StrategySpec):
    """Hierarchical ADPSGD: the learners of a group (a machine) average gradients every step, making
    one super-learner; super-learners run ADPSGD among themselves."""

    name: Literal["h-adpsgd"] = Field("h-adpsgd", description="All-reduce within a group, ADPSGD between groups.")
    group_size: int | None = Field(None, ge=1, le=1024,
                                   description="Learners per group; none: the processes of one machine.")
    peer: Literal["ring", "random"] = Field("ring", description="How a group picks its peer group (as adpsgd's).")


@dataclass(frozen=True)
class StrategyDefinition:
    """A strategy as a plugin registers it: the spec class, and where it can run."""

    name: str
    spec: type[StrategySpec]
    description: str
    process_models: frozenset[str] = frozenset({"process_per_device"})
    """The backends' process models it runs under (benchbase.backend.Capabilities.process_model)."""
    min_learners: int = 2
    """Fewer learners than this is refused before the clock (one learner has nothing to combine)."""
    closed: bool = False
    """Whether a run with it may be in the closed division (sync alone: the workloads' rules)."""


BUILTIN_STRATEGIES: tuple[StrategyDefinition, ...] = (
    StrategyDefinition("sync", SyncSpec, "gradients all-reduced every step (the paper's; the closed division's)",
                       process_models=frozenset({"single_process", "process_per_device", "process_per_machine"}),
                       min_learners=1, closed=True),
    StrategyDefinition("local_sgd", LocalSGDSpec, "post-local SGD: models averaged every `period` steps"),
    StrategyDefinition("hierarchical", HierarchicalSpec,
                       "gradients averaged within a group every step, models across groups every `period` steps"),
    StrategyDefinition("powersgd", PowerSGDSpec, "gradients all-reduced as a low-rank approximation (PowerSGD)"),
    StrategyDefinition("fp16_compress", FP16CompressSpec, "gradients all-reduced in float16"),
    StrategyDefinition("bf16_compress", BF16CompressSpec, "gradients all-reduced in bfloat16"),
    StrategyDefinition("adpsgd", ADPSGDSpec, "asynchronous decentralized SGD: weights averaged with one peer per step"),
    StrategyDefinition("h-adpsgd", HADPSGDSpec, "all-reduce within a group, ADPSGD between groups"),
)

_SPECS: dict[str, type[StrategySpec]] = {definition.name: definition.spec for definition in BUILTIN_STRATEGIES}


def register_strategy_spec(definition: StrategyDefinition) -> None:
    """Make a plugin's strategy readable wherever a spec names it (config.json, a resumed run)."""
    _SPECS.setdefault(definition.name, definition.spec)


def communication_precision_of(name: str) -> str | None:
    """The lowest precision strategy ``name`` communicates in; None for a strategy not installed here."""
    return _SPECS.get(name, UnknownStrategySpec).communication_precision


def validate_strategy(value: Any) -> Any:
    """A mapping into its strategy's spec (no ``name``: sync); an unknown name reads as recorded."""
    if isinstance(value, dict):
        name = value.get("name", DEFAULT_STRATEGY)
        spec = _SPECS.get(name, UnknownStrategySpec)
        return spec.model_validate({**value, "name": name})
    return value


def check_strategy_fields(definitions: Mapping[str, StrategyDefinition], definition: StrategyDefinition,
                          settings: Iterable[tuple[str, Any]]) -> None:
    """A ``--set strategy.FIELD`` the run's strategy lacks, refused in one line that names that
    strategy and those of ``definitions`` that have the field. Without --strategy it is sync, which
    has no parameters: "strategy has no field 'period'" alone reads as if no strategy had one."""
    parameters = sorted(field for field in definition.spec.model_fields if field != "name")
    for path, _ in settings:
        field = path.split(".")[0]
        if field == "name" or field in parameters:
            continue  # the spec's own validation says what is wrong with it, if anything
        having = sorted(name for name, other in definitions.items()
                        if name != definition.name and field in other.spec.model_fields)
        lacks = f"no field {field!r} (its parameters: {', '.join(parameters)})" if parameters else "no parameters"
        if having:
            selects = f"; --strategy NAME selects one with {field}: {_either(having)}"
        else:  # a misspelt field: the strategy's own parameters say enough
            selects = "" if parameters else "; --strategy NAME selects another"
        default = " (the default)" if definition.name == DEFAULT_STRATEGY else ""
        raise InputError(f"--set strategy.{path}: training strategy {definition.name!r}{default} has {lacks}{selects}")


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
