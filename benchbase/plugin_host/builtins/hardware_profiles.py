"""Registers the hardware profiles that ship with benchbase (hardware_profiles/*.yaml)."""

from __future__ import annotations

from pathlib import Path

from benchbase import hookimpl
from benchbase.specs import HardwareProfile
from benchbase.specs.yaml_files import load_spec_file


def profiles_directory() -> Path:
    """hardware_profiles/ inside an installed wheel, else beside the package in a checkout."""
    packaged = Path(__file__).resolve().parents[2] / "hardware_profiles"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "hardware_profiles"


@hookimpl
def register_hardware_profiles(register):
    for path in sorted(profiles_directory().glob("*.yaml")):
        register(load_spec_file(HardwareProfile, path))
