"""Registers the workloads that ship with benchbase (benchbase/workloads/*.yaml)."""

from __future__ import annotations

from importlib import resources

from benchbase import hookimpl
from benchbase.specs import WorkloadSpec
from benchbase.specs.yaml_files import load_spec_text

__all__ = ["builtin_workload", "register_workloads"]


@hookimpl
def register_workloads(register):
    for item in sorted(resources.files("benchbase.workloads").iterdir(), key=lambda item: item.name):
        if item.name.endswith(".yaml"):
            register(load_spec_text(WorkloadSpec, item.read_text(encoding="utf-8"), f"workloads/{item.name}"))


def builtin_workload(name: str) -> WorkloadSpec:
    """A workload that ships with benchbase, read without a plugin manager (kit, tests, benchmarks)."""
    item = resources.files("benchbase.workloads") / f"{name}.yaml"
    return load_spec_text(WorkloadSpec, item.read_text(encoding="utf-8"), f"workloads/{name}.yaml")
