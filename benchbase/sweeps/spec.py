"""Sweeps: a grid of runs (backends x profiles x variants x seeds) as one experiment.

A sweep file names a workload, the grid's axes and the run options every run shares:

    name: batch-sizes
    workload: ds2-mini
    backends: [torch]
    profiles: [cpu]
    seeds: [0, 1]
    variants:
      - {name: batch16, set: [hardware.pipeline.global_batch=16, hardware.pipeline.batch_per_device=16]}
      - {name: batch32, set: [hardware.pipeline.global_batch=32, hardware.pipeline.batch_per_device=32]}
    max_epochs: 2
    checkpoint_every: 20

Each run of the grid is one `benchbase run` with the options below; the plan is pure (no files
touched), so `benchbase sweep --dry-run` and the tests can look at it. Paths in the file (a
workload or profile YAML, data) are taken as `benchbase run` takes them: relative to the
current directory.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ConfigDict, Field, field_validator, model_validator

from benchbase.errors import InputError
from benchbase.specs._base import Spec
from benchbase.specs.model import PRECISIONS
from benchbase.specs.overrides import apply_overrides, parse_override
from benchbase.specs.strategy import DEFAULT_STRATEGY, check_strategy_fields
from benchbase.specs.tta import parse_target
from benchbase.specs.yaml_files import load_spec_file, names_a_file

__all__ = ["PlannedRun", "SweepSpec", "Variant", "check_resolvable", "load_sweep", "plan_sweep"]

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""Names that become folder names: no separators, no leading dot (hidden), short."""


def _check_safe(name: str, what: str) -> str:
    if not SAFE_NAME.match(name):
        raise ValueError(f"{what} {name!r} cannot name a folder (letters, digits, '.', '_', '-'; at most 64; "
                         "not starting with '.' or '-')")
    return name


def _check_unique(items: list, what: str) -> list:
    repeated = sorted({str(item) for item in items if items.count(item) > 1})
    if repeated:
        raise ValueError(f"{what} repeat: {', '.join(repeated)}")
    return items


def _parsed_as_a_field(parse: Callable[[str], object], text: str) -> str:
    """``text`` if ``parse`` takes it; its InputError as the ValueError pydantic places under the field."""
    try:
        parse(text)
    except InputError as error:
        raise ValueError(str(error)) from None
    return text


def profile_label(profile: str) -> str:
    """How a profile appears in folder names: its name, or a YAML file's stem."""
    return Path(profile).stem if names_a_file(profile) else profile


class Variant(Spec):
    name: str | None = Field(None, description="Part of the configuration's folder name; required when there "
                             "are several variants.")
    settings: tuple[str, ...] = Field((), alias="set", max_length=200,
                                      description="SPEC.PATH=VALUE overrides of this variant (after the sweep's own).")
    strategy: str | None = Field(None, min_length=1, max_length=64,
                                 description="The variant's training strategy (benchbase run --strategy); none: sync.")

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str | None) -> str | None:
        return name if name is None else _check_safe(name, "variant name")

    @field_validator("settings")
    @classmethod
    def _overrides_parse(cls, settings: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_parsed_as_a_field(parse_override, text) for text in settings)


class SweepSpec(Spec):
    name: str = Field(description="The sweep's name (default folder: runs/sweep-NAME).")
    workload: str = Field(min_length=1, description="Workload name or YAML file, as `benchbase run --workload`.")
    backends: list[str] = Field(min_length=1, max_length=16)
    profiles: list[str] = Field(min_length=1, max_length=32, description="Hardware profile names or YAML files.")
    seeds: list[int] = Field(min_length=1, max_length=1000)
    variants: list[Variant] = Field(default_factory=lambda: [Variant()], min_length=1, max_length=100)
    # The run options every run of the sweep shares (those of `benchbase run`).
    settings: tuple[str, ...] = Field((), alias="set", max_length=200, description="SPEC.PATH=VALUE overrides.")
    max_epochs: int | None = Field(None, ge=1)
    max_minutes: float | None = Field(None, ge=0.01)
    targets: tuple[str, ...] = Field((), max_length=32, description="METRIC=VALUE, replacing the workload's.")
    precision: str | None = None
    no_final_eval: bool = False
    checkpoint_every: int | None = Field(None, ge=1, le=10_000_000)
    data: str | None = Field(None, min_length=1, description="A prepared feature store.")

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        return _check_safe(name, "sweep name")

    @field_validator("backends")
    @classmethod
    def _backends_name_folders(cls, backends: list[str]) -> list[str]:
        return _check_unique([_check_safe(name, "backend") for name in backends], "backends")

    @field_validator("settings")
    @classmethod
    def _overrides_parse(cls, settings: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_parsed_as_a_field(parse_override, text) for text in settings)

    @field_validator("targets")
    @classmethod
    def _targets_parse(cls, targets: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_parsed_as_a_field(parse_target, text) for text in targets)

    @field_validator("profiles")
    @classmethod
    def _profiles_name_folders(cls, profiles: list[str]) -> list[str]:
        _check_unique(profiles, "profiles")
        labels = [_check_safe(profile_label(profile), "profile") for profile in profiles]
        _check_unique(labels, "profile folder names")
        return profiles

    @field_validator("seeds")
    @classmethod
    def _seeds_in_range(cls, seeds: list[int]) -> list[int]:
        for seed in seeds:
            if not 0 <= seed < 2**31:
                raise ValueError(f"seed {seed} is outside 0 .. 2**31-1")
        return _check_unique(seeds, "seeds")

    @field_validator("precision")
    @classmethod
    def _known_precision(cls, precision: str | None) -> str | None:
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        return precision

    @model_validator(mode="after")
    def _variants_tell_apart(self) -> SweepSpec:
        names = [variant.name for variant in self.variants]
        if len(names) > 1 and None in names:
            raise ValueError("variants: with several variants, each needs a name")
        _check_unique(names, "variant names")
        configurations = [run.configuration for run in plan_sweep(self) if run.seed == self.seeds[0]]
        _check_unique(configurations, "configuration folder names (backend-profile-variant)")
        return self

    def common_options(self) -> list[str]:
        """The `benchbase run` options every run of the sweep shares."""
        options: list[str] = []
        for flag, value in (("--max-epochs", self.max_epochs), ("--max-minutes", self.max_minutes),
                            ("--precision", self.precision), ("--checkpoint-every", self.checkpoint_every),
                            ("--data", self.data)):
            if value is not None:
                options += [flag, str(value)]
        for target in self.targets:
            options += ["--target", target]
        if self.no_final_eval:
            options.append("--no-final-eval")
        for setting in self.settings:
            options += ["--set", setting]
        return options


@dataclass(frozen=True)
class PlannedRun:
    configuration: str
    """The configuration's folder (backend-profile[-variant]): one group of the report, its seeds the runs."""
    backend: str
    profile: str
    variant: str | None
    seed: int
    options: tuple[str, ...]
    """`benchbase run`'s options for this run, all but --out (the folder may move; the run stays the same)."""

    @property
    def name(self) -> str:
        """The run as the sweep names it, and its folder inside the sweep's: CONFIGURATION/seed-S."""
        return f"{self.configuration}/seed-{self.seed}"

    def folder(self, sweep_dir: Path) -> Path:
        return sweep_dir / self.configuration / f"seed-{self.seed}"

    def log(self, sweep_dir: Path) -> Path:
        """The run's output, beside its folder: `benchbase run` wants its folder empty or absent."""
        return sweep_dir / self.configuration / f"seed-{self.seed}.log"

    def arguments(self, sweep_dir: Path) -> list[str]:
        return ["run", *self.options, "--out", str(self.folder(sweep_dir))]


def plan_sweep(spec: SweepSpec) -> list[PlannedRun]:
    """Every run of the grid, configuration by configuration, each configuration's seeds together."""
    planned = []
    common = spec.common_options()
    for backend in spec.backends:
        for profile in spec.profiles:
            for variant in spec.variants:
                configuration = "-".join(part for part in (backend, profile_label(profile), variant.name) if part)
                variant_options = [option for setting in variant.settings for option in ("--set", setting)]
                if variant.strategy is not None:
                    variant_options += ["--strategy", variant.strategy]
                for seed in spec.seeds:
                    options = ("--workload", spec.workload, "--backend", backend, "--hw", profile,
                               "--seed", str(seed), *common, *variant_options)
                    planned.append(PlannedRun(configuration, backend, profile, variant.name, seed, options))
    return planned


def load_sweep(path: Path) -> SweepSpec:
    """The sweep file, or a one-line InputError naming it and what is wrong."""
    return load_spec_file(SweepSpec, path)


def check_resolvable(spec: SweepSpec, source: Path, registry) -> None:
    """Every name and override of the grid resolves against ``registry``, before the first run
    starts (not in run 7 of 8); a one-line InputError naming ``source`` otherwise."""
    try:
        for backend in spec.backends:
            if backend not in registry.backends:
                raise InputError(f"unknown backend {backend!r}; available: {', '.join(sorted(registry.backends))}")
        workload = registry.workload(spec.workload)
        profiles = {name: registry.profile(name) for name in spec.profiles}
    except InputError as error:
        raise InputError(f"{source}: {error}") from None
    for variant in spec.variants:
        parsed = [parse_override(text) for text in (*spec.settings, *variant.settings)]
        for name, profile in profiles.items():
            try:
                apply_overrides(workload, [(path, value) for root, path, value in parsed if root == "workload"],
                                "workload")
                apply_overrides(profile, [(path, value) for root, path, value in parsed if root == "hardware"],
                                "hardware")
            except InputError as error:
                where = f"profile {name}" + (f", variant {variant.name}" if variant.name else "")
                raise InputError(f"{source}: {where}: {error}") from None
        try:
            strategy = registry.strategy(variant.strategy or DEFAULT_STRATEGY)
            settings = [(path, value) for root, path, value in parsed if root == "strategy"]
            check_strategy_fields(registry.strategies, strategy, settings)
            apply_overrides(strategy.spec(), settings, "strategy")
        except InputError as error:
            raise InputError(f"{source}: variant {variant.name or '(the only one)'}: {error}") from None
