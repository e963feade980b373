"""MLPerf's system description (systems/SYSTEM.json), filled from what a run recorded.

Every value is a string, as in MLPerf's own submissions (its result summarizer joins some of them
as text). What a run does not record is an empty string, never a guess: benchbase knows the host
CPU, memory and the training devices from the hardware profile the run used (config.json), the
measured CPU model, the OS and the software from the log's benchbase_environment, and how many
processes trained from the log; it knows nothing of caches, storage, networking or cooling.
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any

from pydantic import ConfigDict, Field

from benchbase.compliance.keys import constants
from benchbase.packaging.runs import PackagedRun
from benchbase.specs._base import Spec

__all__ = ["AVAILABILITY", "REQUIRED_KEYS", "SystemDescription", "describe_run"]

AVAILABILITY = {constants.ONPREM: "Available on-premise", constants.CLOUD: "Available cloud",
                constants.RESEARCH: "Research, Development, or Internal (RDI)"}
"""The log's submission_status -> the system description's status (MLPerf Training 4.1 and later)."""
_TEXT = 500


def _text(description: str) -> Any:
    return Field("", max_length=_TEXT, description=description)


class SystemDescription(Spec):
    """MLPerf Training's system description: its 33 required keys, in its checker's order."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    submitter: str = Field(min_length=1, max_length=64, description="The organization (the package's ORG).")
    division: str = Field(min_length=1, max_length=16, description="closed or open, as the runs' logs state it.")
    status: str = _text("Availability: the runs' submission_status in MLPerf's words.")
    system_name: str = Field(min_length=1, max_length=64, description="The system's name (systems/NAME.json).")
    number_of_nodes: str = _text("Hosts that trained: 1 for a single-process run; unknown for more processes.")
    host_processors_per_node: str = _text("CPU sockets (the hardware profile).")
    host_processor_model_name: str = _text("The CPU model the run measured, else the profile's.")
    host_processor_core_count: str = _text("Physical cores per socket (the profile).")
    host_processor_vcpu_count: str = _text("Hardware threads in total (the profile).")
    host_processor_frequency: str = _text("Base clock (the profile), where it states one.")
    host_processor_caches: str = _text("Not recorded.")
    host_processor_interconnect: str = _text("Not recorded.")
    host_memory_capacity: str = _text("Host memory (the profile).")
    host_storage_type: str = _text("Not recorded.")
    host_storage_capacity: str = _text("Not recorded.")
    host_networking: str = _text("Not recorded.")
    host_networking_topology: str = _text("Not recorded.")
    host_memory_configuration: str = _text("Not recorded.")
    accelerators_per_node: str = _text("GPUs the run trained on; 0 for a CPU run.")
    accelerator_model_name: str = _text("The GPU model (the profile); empty for a CPU run.")
    accelerator_host_interconnect: str = _text("How the GPUs attach (the profile's interconnect).")
    accelerator_frequency: str = _text("Not recorded.")
    accelerator_on_chip_memories: str = Field("", alias="accelerator_on-chip_memories", max_length=_TEXT,
                                              description="Not recorded.")
    accelerator_memory_configuration: str = _text("Not recorded.")
    accelerator_memory_capacity: str = _text("Memory per GPU (the profile).")
    accelerator_interconnect: str = _text("Not recorded.")
    accelerator_interconnect_topology: str = _text("Not recorded.")
    cooling: str = _text("Not recorded.")
    hw_notes: str = _text("The benchbase hardware profile the runs used.")
    framework: str = _text("The framework the backend's distribution requires, with the version the run recorded.")
    other_software_stack: str = _text("benchbase, the backend's distribution, Python and the recorded packages.")
    operating_system: str = _text("The OS the run recorded.")
    sw_notes: str = _text("The accelerator builds the run recorded (CUDA, cuDNN).")

    def to_json_dict(self) -> dict[str, str]:
        return self.model_dump(by_alias=True)


REQUIRED_KEYS: tuple[str, ...] = tuple(field.alias or name for name, field in SystemDescription.model_fields.items())


def describe_run(run: PackagedRun, org: str, system: str) -> SystemDescription:
    """The system ``run`` trained on, as MLPerf describes one."""
    cpu, devices = run.hardware.get("cpu") or {}, run.hardware.get("devices") or {}
    software = run.environment
    return SystemDescription(
        submitter=org, division=run.division, status=AVAILABILITY.get(run.status or "", run.status or ""),
        system_name=system, number_of_nodes="1" if run.world_size == 1 else "",
        host_processors_per_node=_plain(cpu.get("sockets")),
        host_processor_model_name=_plain((software.get("cpu") or {}).get("model") or cpu.get("model")),
        host_processor_core_count=_per_socket(cpu.get("cores"), cpu.get("sockets")),
        host_processor_vcpu_count=_plain(cpu.get("threads")),
        host_processor_frequency=_unit(cpu.get("ghz"), "GHz"), host_memory_capacity=_unit(cpu.get("ram_gb"), "GB"),
        **_accelerators(run, devices), hw_notes=_hardware_note(run.hardware), framework=_framework(run),
        other_software_stack=_software_stack(run), operating_system=_plain(software.get("os")),
        sw_notes=_accelerator_builds(software.get("accelerator") or {}))


def _accelerators(run: PackagedRun, devices: dict[str, Any]) -> dict[str, str]:
    """The GPUs the run trained on (its device plan), as the profile describes them; none on a CPU run."""
    kind = run.device_plan.get("kind") or devices.get("kind")
    if kind != "gpu":
        return {"accelerators_per_node": "0" if kind == "cpu" else ""}
    count = run.device_plan.get("count") or devices.get("count")
    return {"accelerators_per_node": _plain(count), "accelerator_model_name": _plain(devices.get("model")),
            "accelerator_host_interconnect": _plain(devices.get("interconnect")),
            "accelerator_memory_capacity": _unit(devices.get("memory_gb"), "GB")}


def _hardware_note(hardware: dict[str, Any]) -> str:
    name = hardware.get("name")
    if not name:
        return ""
    description = hardware.get("description")
    return f"benchbase hardware profile {name}" + (f": {description}" if description else "")


def _framework(run: PackagedRun) -> str:
    """The recorded packages that the backend's distribution requires (any extra: tensorflow is one) and
    benchbase itself always does not (numpy is everyone's), where that distribution is installed here."""
    distribution = run.environment.get("backend_distribution")
    recorded = run.environment.get("packages") or {}
    if not isinstance(distribution, str) or not recorded:
        return ""
    try:
        names = _required(distribution.split(" ")[0], extras=True) - _required("benchbase", extras=False)
    except metadata.PackageNotFoundError:
        return ""
    return ", ".join(f"{name} {version}" for name, version in recorded.items() if _normal(name) in names)


def _required(distribution: str, extras: bool) -> set[str]:
    return {_normal(re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0])
            for requirement in metadata.requires(distribution) or [] if extras or "extra ==" not in requirement}


def _software_stack(run: PackagedRun) -> str:
    software = run.environment
    version = (software.get("benchbase") or {}).get("version")
    parts = [f"benchbase {version}" if version else "", _plain(software.get("backend_distribution")),
             f"{software.get('implementation') or 'Python'} {software['python']}" if software.get("python") else ""]
    parts += [f"{name} {version}" for name, version in (software.get("packages") or {}).items()]
    return ", ".join(part for part in parts if part)


def _accelerator_builds(builds: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in builds.items() if isinstance(value, str | int | float)
                     and not isinstance(value, bool))


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _per_socket(cores: Any, sockets: Any) -> str:
    if not isinstance(cores, int) or not isinstance(sockets, int) or sockets < 1 or cores % sockets:
        return ""
    return str(cores // sockets)


def _unit(value: Any, unit: str) -> str:
    return f"{value:g} {unit}" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _plain(value: Any) -> str:
    return "" if value is None or isinstance(value, bool) else str(value)
