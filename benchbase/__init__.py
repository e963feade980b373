"""benchbase: time-to-accuracy benchmarks for speech recognition training."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

import pluggy

__all__ = ["MOVED_MODULES", "__version__", "hookimpl"]
__version__ = "0.2.0"

hookimpl = pluggy.HookimplMarker("benchbase")
"""Marker for plugin hook implementations: ``@benchbase.hookimpl``."""

MOVED_MODULES = {
    "benchbase.weight_layout": "benchbase.families.ds2.weight_layout",
    "benchbase.quantization": "benchbase.families.ds2.quantization",
    "benchbase.yaml_specs": "benchbase.specs.yaml_files",
    "benchbase.overrides": "benchbase.specs.overrides",
    "benchbase.plugins": "benchbase.plugin_host",
    "benchbase.registry": "benchbase.plugin_host.registry",
    "benchbase.default_plugins": "benchbase.plugin_host.builtins",
    "benchbase.default_plugins.workloads": "benchbase.plugin_host.builtins.workloads",
    "benchbase.default_plugins.hardware_profiles": "benchbase.plugin_host.builtins.hardware_profiles",
    "benchbase.sweep": "benchbase.sweeps.spec",
    "benchbase.sweep_folder": "benchbase.sweeps.folder",
    "benchbase.sweep_runner": "benchbase.sweeps.runner",
    "benchbase.termination": "benchbase.harness.termination",
    "benchbase.replay": "benchbase.harness.replay",
    "benchbase.harness.stop": "benchbase.compliance.keys",
    "benchbase.harness.events": "benchbase.harness.hook_payloads",
    "benchbase.hardware_detect": "benchbase.telemetry.hardware_detect",
    "benchbase.cpu_features": "benchbase.telemetry.cpu_features",
}
"""Import paths of 0.1 that still work in 0.2 (with a DeprecationWarning) and go in 0.3 (CHANGELOG.md)."""


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old import path with the module at its new place: one module object, two names."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == "benchbase.default_plugins")

    def create_module(self, spec):
        new_name = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new_name}; the old path goes in benchbase 0.3",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new_name)
        spec.loader_state = module.__spec__  # importlib stamps the alias's spec on the module: keep its own
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # the module ran once already, under its new name


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())  # first: an aliased package's __path__ would find its modules again
