"""What the plugins contributed: backends, workloads and hardware profiles, by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pluggy

from benchbase.backend import Backend, BackendReference
from benchbase.errors import InputError
from benchbase.plugin_host import DEFAULT_PLUGINS, PluginFailure, PluginManager
from benchbase.specs import HardwareProfile, WorkloadSpec
from benchbase.specs.strategy import StrategyDefinition, register_strategy_spec
from benchbase.specs.yaml_files import load_spec_file, names_a_file
from benchbase.telemetry.environment import entry_point_distributions
from benchbase.telemetry.hardware_detect import AUTO_PROFILE, detect_profile

__all__ = ["Registry", "collect_registry"]


@dataclass
class Registry:
    backends: dict[str, type[Backend] | BackendReference] = field(default_factory=dict)
    workloads: dict[str, WorkloadSpec] = field(default_factory=dict)
    profiles: dict[str, HardwareProfile] = field(default_factory=dict)
    strategies: dict[str, StrategyDefinition] = field(default_factory=dict)

    def backend_entry(self, name: str) -> type[Backend] | BackendReference:
        """What a plugin registered under ``name``, without importing a referenced backend's framework."""
        return _lookup(self.backends, name, "backend")

    def backend(self, name: str) -> type[Backend]:
        """The backend class; a registered reference is imported now."""
        backend = self.backend_entry(name)
        return backend.load() if isinstance(backend, BackendReference) else backend

    def strategy(self, name: str) -> StrategyDefinition:
        return _lookup(self.strategies, name, "strategy")

    def workload(self, name_or_path: str) -> WorkloadSpec:
        """A registered workload by name, or a YAML file when the argument is a path."""
        if names_a_file(name_or_path):
            return _spec_file(WorkloadSpec, name_or_path, "workload")
        return _lookup(self.workloads, name_or_path, "workload", also="or a workload YAML file's path")

    def profile(self, name_or_path: str) -> HardwareProfile:
        """A registered profile by name, a YAML file when the argument is a path, or this machine for "auto"."""
        if names_a_file(name_or_path):
            return _spec_file(HardwareProfile, name_or_path, "hardware profile")
        if name_or_path == AUTO_PROFILE and AUTO_PROFILE not in self.profiles:
            return detect_profile()  # this machine, as it is now
        auto = f"{AUTO_PROFILE} (this machine), " if AUTO_PROFILE not in self.profiles else ""
        return _lookup(self.profiles, name_or_path, "hardware profile", also=f"{auto}or a profile YAML file's path")


def _spec_file(model, name_or_path: str, what: str):
    path = Path(name_or_path)
    if not path.is_file():
        raise InputError(f"{path}: {what} file not found")
    return load_spec_file(model, path)


def collect_registry(manager: pluggy.PluginManager) -> Registry:
    """Call every plugin's registration hooks, one plugin at a time, and gather what they register.

    Built-in plugins register first. A plugin whose hook raises, or that registers a name
    already taken (a built-in workload redefined, say), is skipped whole and recorded in
    ``manager.failures``; it never changes what the other plugins registered.
    """
    registry = Registry()
    tables = {"register_backends": (registry.backends, "backend"),
              "register_workloads": (registry.workloads, "workload"),
              "register_hardware_profiles": (registry.profiles, "hardware profile"),
              "register_strategies": (registry.strategies, "strategy")}
    for plugin_name, plugin in _plugins_builtin_first(manager):
        try:
            contributed = {hook: _contributions(manager, plugin, hook, *tables[hook]) for hook in tables}
        except Exception as error:  # noqa: BLE001 - third-party code: any failure skips that plugin
            _record_failure(manager, plugin_name, error)
            continue
        for hook, items in contributed.items():
            tables[hook][0].update(items)
    for definition in registry.strategies.values():
        register_strategy_spec(definition)  # a plugin's strategy now reads in config.json like a built-in
    return registry


def _plugins_builtin_first(manager: pluggy.PluginManager) -> list[tuple[str, object]]:
    builtin = [(name, plugin) for name, plugin in manager.list_name_plugin() if name in DEFAULT_PLUGINS]
    others = [(name, plugin) for name, plugin in manager.list_name_plugin() if name not in DEFAULT_PLUGINS]
    return sorted(builtin, key=lambda item: DEFAULT_PLUGINS.index(item[0])) + others


def _contributions(manager: pluggy.PluginManager, plugin: object, hook: str, table: dict, kind: str) -> dict:
    """What one plugin registers through one hook; raises on a name taken already."""
    items: dict = {}

    def register(item) -> None:
        if item.name in table or item.name in items:
            raise InputError(f"{kind} {item.name!r} is registered already")
        items[item.name] = item

    others = [other for other in manager.get_plugins() if other is not plugin]
    manager.subset_hook_caller(hook, remove_plugins=others)(register=register)
    return items


def _record_failure(manager: pluggy.PluginManager, plugin_name: str, error: Exception) -> None:
    distributions = entry_point_distributions()
    failure = PluginFailure(plugin_name, distributions.get(plugin_name, "not installed"),
                            f"{type(error).__name__}: {error}")
    if isinstance(manager, PluginManager):
        manager.failures.append(failure)
    else:
        raise error


def _lookup(table: dict, name: str, kind: str, also: str = ""):
    """``table[name]``, or a one-line InputError listing the names (and ``also``: what else the option takes)."""
    if name not in table:
        available = ", ".join([*sorted(table), also] if also else sorted(table)) or "none"
        # A file here whose name neither ends in .yaml nor holds a "/" is taken for a registered name.
        hint = (f" ({name} is a file: name a spec file ./{name}, or give it a .yaml suffix)"
                if Path(name).is_file() else "")
        raise InputError(f"unknown {kind} {name!r}; available: {available}{hint}")
    return table[name]
