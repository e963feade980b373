"""What the plugins contributed: backends, workloads and hardware profiles, by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pluggy

from benchbase.backend import Backend, BackendReference
from benchbase.errors import InputError
from benchbase.specs import HardwareProfile, WorkloadSpec
from benchbase.yaml_specs import load_spec_file

__all__ = ["Registry", "collect_registry"]


@dataclass
class Registry:
    backends: dict[str, type[Backend] | BackendReference] = field(default_factory=dict)
    workloads: dict[str, WorkloadSpec] = field(default_factory=dict)
    profiles: dict[str, HardwareProfile] = field(default_factory=dict)

    def backend(self, name: str) -> type[Backend]:
        """The backend class; a registered reference is imported now."""
        backend = _lookup(self.backends, name, "backend")
        return backend.load() if isinstance(backend, BackendReference) else backend

    def workload(self, name: str) -> WorkloadSpec:
        return _lookup(self.workloads, name, "workload")

    def profile(self, name_or_path: str) -> HardwareProfile:
        """A registered profile by name, or a YAML file when the argument is a path."""
        if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
            path = Path(name_or_path)
            if not path.is_file():
                raise InputError(f"{path}: hardware profile file not found")
            return load_spec_file(HardwareProfile, path)
        return _lookup(self.profiles, name_or_path, "hardware profile")


def collect_registry(manager: pluggy.PluginManager) -> Registry:
    """Call the registration hooks of every plugin and gather what they register."""
    registry = Registry()
    manager.hook.register_backends(register=_registrar(registry.backends, "backend"))
    manager.hook.register_workloads(register=_registrar(registry.workloads, "workload"))
    manager.hook.register_hardware_profiles(register=_registrar(registry.profiles, "hardware profile"))
    return registry


def _registrar(table: dict, kind: str):
    def register(item) -> None:
        name = item.name
        if name in table:
            raise InputError(f"{kind} {name!r} is registered twice")
        table[name] = item

    return register


def _lookup(table: dict, name: str, kind: str):
    if name not in table:
        available = ", ".join(sorted(table)) or "none"
        raise InputError(f"unknown {kind} {name!r}; available: {available}")
    return table[name]
