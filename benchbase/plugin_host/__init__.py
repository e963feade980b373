"""The plugin host: a fresh plugin manager per invocation, no module-level global.

Plugins are found through the entry-point group ``benchbase``. The environment variable
BENCHBASE_LOAD_PLUGINS restricts which ones load: a comma-separated list of entry-point or
distribution names; set but empty, no third-party plugin loads.

A plugin may bring a model family (its spec is defined when its module is imported): importing
this package makes the installed plugins a family source of ``benchbase.specs.model``, so a
workload of a plugin's family reads wherever one is read (config.json too, with no registry).
"""

from __future__ import annotations

import difflib
import importlib
import os
from dataclasses import dataclass
from importlib import metadata

import pluggy

from benchbase import hookspecs
from benchbase.specs.model import add_family_source

__all__ = [
    "DEFAULT_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PluginFailure",
    "PluginManager",
    "get_plugin_manager",
    "load_entrypoint_plugins",
]

ENTRY_POINT_GROUP = "benchbase"
DEFAULT_PLUGINS = (
    "benchbase.plugin_host.builtins.workloads",
    "benchbase.plugin_host.builtins.hardware_profiles",
    "benchbase.plugin_host.builtins.strategies",
)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was skipped: it failed to import, or raised in a registration hook."""

    plugin: str
    distribution: str
    error: str

    def describe(self) -> str:
        return f"plugin {self.plugin!r} ({self.distribution}) skipped: {self.error}"


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering the plugins that were skipped and why."""

    def __init__(self) -> None:
        super().__init__("benchbase")
        self.failures: list[PluginFailure] = []


def get_plugin_manager(load_entrypoints: bool = True) -> PluginManager:
    """A new manager with the hook specs, the built-in plugins and (optionally) entry points."""
    manager = PluginManager()
    manager.add_hookspecs(hookspecs)
    for module_name in DEFAULT_PLUGINS:
        manager.register(importlib.import_module(module_name), name=module_name)
    manager.check_pending()
    if load_entrypoints:
        load_entrypoint_plugins(manager)
    return manager


def load_entrypoint_plugins(manager: PluginManager) -> list[str]:
    """Register the ``benchbase`` entry points that BENCHBASE_LOAD_PLUGINS allows.

    A plugin that fails to import, or implements a hook benchbase does not define (a misspelt
    ``register_backend``), is skipped and remembered in ``manager.failures``: one broken
    third-party package must not take down every command, and none is silently half-loaded.
    """
    allowed = _allowed_plugins()
    loaded = []
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        distribution = entry_point.dist.name if entry_point.dist else ""
        if allowed is not None and not {entry_point.name, distribution} & allowed:
            continue
        if manager.has_plugin(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
            manager.register(plugin, name=entry_point.name)
            _check_hook_names(manager, plugin)
        except Exception as error:  # noqa: BLE001  any import-time failure of third-party code
            if manager.has_plugin(entry_point.name):
                manager.unregister(name=entry_point.name)
            manager.failures.append(PluginFailure(entry_point.name, distribution or "unknown distribution",
                                                  _describe(error)))
            continue
        loaded.append(entry_point.name)
    return loaded


def _check_hook_names(manager: PluginManager, plugin: object) -> None:
    """pluggy's check that every hook implementation has a spec, so a misspelt hook is an error, not a no-op."""
    try:
        manager.check_pending()
    except pluggy.PluginValidationError:
        unknown = sorted(name for name, caller in vars(manager.hook).items()
                         if not name.startswith("_") and not caller.has_spec()
                         and any(implementation.plugin is plugin for implementation in caller.get_hookimpls()))
        hooks = sorted(name for name, value in vars(hookspecs).items() if hasattr(value, "benchbase_spec"))
        close = difflib.get_close_matches(unknown[0], hooks, n=1) if unknown else []
        hint = f"did you mean {close[0]!r}?" if close else f"the hooks are {', '.join(hooks)}"
        raise pluggy.PluginValidationError(plugin, f"unknown hook {', '.join(map(repr, unknown))} ({hint})") from None


def _describe(error: Exception) -> str:
    if isinstance(error, pluggy.PluginValidationError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _allowed_plugins() -> set[str] | None:
    value = os.environ.get("BENCHBASE_LOAD_PLUGINS")
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def _import_plugin_families() -> list[str]:
    """The installed plugins imported (their families defined); each one skipped, one line."""
    return [failure.describe() for failure in get_plugin_manager().failures]


add_family_source(_import_plugin_families)
