"""The cluster recipes in examples/: the Slurm batch script and the Kubernetes manifest start the
torchrun that README describes (`torchrun --nnodes N --nproc-per-node G -m benchbase run ...`), with
every knob they name, and the manifest is what the Kubernetes API accepts.

Neither a Slurm controller nor a cluster is at hand: the script runs under bash with Slurm's
environment and stub srun, scontrol and torchrun that record their arguments; torch's own argument
parser reads the torchrun line, and benchbase's the run command behind it. The manifest goes through
the models of the official Kubernetes client (generated from the API's OpenAPI schema), and its
container command runs the same way as the script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from benchbase.cli.run_command import run as run_command

EXAMPLES = Path(__file__).parent.parent / "examples"
SBATCH = EXAMPLES / "slurm" / "benchbase.sbatch"
MANIFEST = EXAMPLES / "kubernetes" / "benchbase-job.yaml"
KNOBS = ("WORKLOAD", "BACKEND", "HW", "DATA", "SEED", "OUT", "GPUS_PER_NODE", "PROCS_PER_NODE")
"""The run's knobs, in both recipes (the node count is Slurm's --nodes and the Job's completions)."""

RECORDER = """#!/bin/sh
# Records its name and arguments as one JSON line, as the real program would have received them.
python3 -c 'import json, os, sys; print(json.dumps([os.path.basename(sys.argv[1]), *sys.argv[2:]]))' "$0" "$@" \
    >> "$RECORDED"
"""
SRUN = RECORDER + """
while [ "${1#--}" != "$1" ]; do shift; done   # srun's own options; then the command, on one node here
exec "$@"
"""
SCONTROL = RECORDER + """
echo node-a; echo node-b
"""


@pytest.fixture
def stubs(tmp_path) -> Path:
    """A folder whose bin/ holds srun, scontrol and torchrun that record their arguments."""
    folder = tmp_path / "venv"
    (folder / "bin").mkdir(parents=True)
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("torchrun", RECORDER)):
        (folder / "bin" / name).write_text(text)
        (folder / "bin" / name).chmod(0o755)
    return folder


def _recorded(path: Path) -> dict[str, list[str]]:
    return {line[0]: line[1:] for line in map(json.loads, path.read_text().splitlines())}


def _benchbase_run(torchrun_arguments: list[str]) -> tuple[object, dict]:
    """torch's parse of a torchrun command line, and benchbase's of the `benchbase run` it starts."""
    launcher = pytest.importorskip("torch.distributed.run", reason="torch is not installed")
    parsed = launcher.get_args_parser().parse_args(torchrun_arguments)
    assert parsed.module and parsed.training_script == "benchbase" and parsed.training_script_args[0] == "run"
    context = run_command.make_context("run", list(parsed.training_script_args[1:]))
    return parsed, context.params


# --- Slurm -------------------------------------------------------------------------------------------------


def test_the_batch_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)


def test_the_batch_script_runs_one_torchrun_per_node_into_benchbase_run(stubs, tmp_path):
    recorded = tmp_path / "recorded.jsonl"
    environment = {"PATH": f"{stubs / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "RECORDED": str(recorded),
                   "VENV": str(stubs),
                   "SLURM_JOB_ID": "4711", "SLURM_JOB_NAME": "benchbase", "SLURM_JOB_NUM_NODES": "2",
                   "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_GPUS_PER_NODE": "a100:4",
                   "BACKEND": "tf", "PROCS_PER_NODE": "1", "SEED": "3", "DATA": str(tmp_path / "store")}
    subprocess.run(["bash", str(SBATCH), "--max-minutes", "90"], check=True, env=environment, timeout=60)
    calls = _recorded(recorded)
    assert calls["scontrol"] == ["show", "hostnames", "node-[a-b]"]
    assert "--ntasks-per-node=1" in calls["srun"]
    launcher, run = _benchbase_run(calls["torchrun"])
    assert (launcher.nnodes, launcher.nproc_per_node) == ("2", "1")
    assert (launcher.rdzv_backend, launcher.rdzv_endpoint, launcher.rdzv_id) == ("c10d", "node-a:29500", "4711")
    assert {key: run[key] for key in ("workload_name", "backend_name", "hardware", "data", "seed", "out", "devices")} \
        == {"workload_name": "ds2", "backend_name": "tf", "hardware": "sys1", "data": tmp_path / "store", "seed": 3,
            "out": Path("/shared/benchbase/runs/benchbase-4711"), "devices": 8}
    assert run["max_minutes"] == 90  # the script's own arguments go to benchbase run


def test_every_knob_of_the_batch_script_is_used():
    text = SBATCH.read_text()
    assigned = re.findall(r"^([A-Z_]+)=", text, flags=re.MULTILINE)
    assert set(KNOBS) <= set(assigned)
    code = "\n".join(line.split(" # ")[0] for line in text.splitlines() if not line.startswith("#"))
    code = re.sub(r"^([A-Z_]+)=\$\{\1:-", "", code, flags=re.MULTILINE)  # a knob's own default is no use of it
    code = re.sub(r"^[A-Z_]+=", "", code, flags=re.MULTILINE)
    assert [name for name in assigned if not re.search(rf"\b{name}\b", code)] == []
    assert re.search(r"^#SBATCH --nodes=\d+$", text, flags=re.MULTILINE)
    assert re.search(r"^#SBATCH --gpus-per-node=\d+$", text, flags=re.MULTILINE)


def test_slurm_accepts_the_batch_script(tmp_path):
    if shutil.which("sbatch") is None:
        pytest.skip("sbatch is not installed: the script is checked under bash with stubs instead")
    # Slurm's commands may be installed with no cluster configured (CI installs them for the
    # one-node cluster of tests/test_slurm_cluster.py, which starts its own): ask a controller first.
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"no Slurm controller to ask: {error}")
    if ping.returncode:
        said = (ping.stderr or ping.stdout or "scontrol ping failed").strip().splitlines()[-1]
        pytest.skip(f"no Slurm controller to ask: {said}")
    checked = subprocess.run(["sbatch", "--test-only", str(SBATCH)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr


# --- Kubernetes --------------------------------------------------------------------------------------------


def _documents() -> dict[str, dict]:
    return {document["kind"]: document for document in yaml.safe_load_all(MANIFEST.read_text())}


def test_the_manifest_is_what_the_kubernetes_api_accepts():
    """Each object read by the Kubernetes client's models and written back unchanged: a misspelt or
    misplaced field would be dropped, a wrong type or a missing required field refused."""
    client = pytest.importorskip("kubernetes.client", reason="the kubernetes client is not installed")
    models = {"Service": client.V1Service, "Job": client.V1Job}
    documents = _documents()
    assert set(documents) == set(models)
    for kind, document in documents.items():
        read = models[kind].from_dict(document)
        assert client.ApiClient().sanitize_for_serialization(read) == document, kind


def test_the_manifest_repeats_its_knobs_consistently():
    service, job = _documents()["Service"], _documents()["Job"]
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    environment = {item["name"]: item.get("value") for item in container["env"]}
    assert set(KNOBS) <= set(environment)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == int(environment["NODES"])
    assert container["resources"]["limits"]["nvidia.com/gpu"] == environment["GPUS_PER_NODE"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    assert environment["RDZV_HOST"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert int(environment["RDZV_PORT"]) == service["spec"]["ports"][0]["port"]
    script = container["args"][0]
    assert [name for name in environment if not re.search(rf"\b{name}\b", script)] == []


@pytest.mark.parametrize("index", [0, 1])
def test_each_pod_runs_torchrun_into_benchbase_run(stubs, tmp_path, index):
    container = _documents()["Job"]["spec"]["template"]["spec"]["containers"][0]
    environment = {item["name"]: item.get("value") or "job-uid" for item in container["env"]}
    recorded = tmp_path / "recorded.jsonl"
    subprocess.run([*container["command"], *container["args"]], check=True, timeout=60, env={
        **environment, "JOB_COMPLETION_INDEX": str(index), "RECORDED": str(recorded),
        "PATH": f"{stubs / 'bin'}:{os.environ['PATH']}"})
    launcher, run = _benchbase_run(_recorded(recorded)["torchrun"])
    assert (launcher.nnodes, launcher.nproc_per_node, launcher.rdzv_backend) == ("2", "4", "c10d")
    assert launcher.rdzv_endpoint == "benchbase-0.benchbase:29500" and launcher.rdzv_id == "job-uid"
    assert launcher.rdzv_conf == f"is_host={'true' if index == 0 else 'false'}"
    assert (run["workload_name"], run["backend_name"], run["hardware"], run["seed"], run["devices"]) == (
        "ds2", "torch", "sys1", 0, 8)
    assert (run["data"], run["out"]) == (Path("/data/librispeech-store"), Path("/runs/benchbase-seed-0"))
