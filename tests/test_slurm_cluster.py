"""The Slurm recipe (examples/slurm/benchbase.sbatch) on a real one-node Slurm cluster.

tests/test_cluster_recipes.py runs the batch script under bash with stub srun and scontrol; here
Debian's slurmctld, slurmd and munged (which .ci/run installs) run it. As tests/test_results_db.py
starts its PostgreSQL server, the fixture makes a throwaway folder with a minimal slurm.conf (one
node, localhost, with the CPUs and memory `slurmd -C` finds), a munge key, the daemons' state,
spool and logs, and starts munged, slurmctld and slurmd in the foreground as its children, on
ports and a socket of their own. The job is the script as a user submits it, the allocation's
options given on sbatch's command line: srun starts torchrun, whose two processes (the cpu2
profile) train ds2-mini for one epoch on the small store, and the run folder must pass
`benchbase check`.

Where the daemons are not installed, or the cluster does not come up (or cannot start a job's
script at all), the test skips and says why; a job that runs and fails, fails it with the job's
output. Every daemon, and anything a job left behind, is stopped at the end.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from cli_helpers import run_benchbase
from real_parts import skip_unless_required

pytestmark = pytest.mark.slow

SBATCH = Path(__file__).parent.parent / "examples" / "slurm" / "benchbase.sbatch"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "sinfo", "squeue", "scontrol", "scancel")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])  # daemons live in sbin
NODE = "localhost"  # the node's name, which the script's `scontrol show hostnames` gives torchrun to meet at
COMES_UP_WITHIN = 60.0  # seconds for the daemons to start and the node to report idle
JOB_STARTS_WITHIN = 60.0
JOB_ENDS_WITHIN = 600.0  # the job takes 10-15 s on 2 cores, but CI shares them with other tests
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED"}


@dataclass
class Cluster:
    folder: Path
    environment: dict[str, str]
    cpus: int

    def run(self, *command: str, timeout: float = 60, **environment: str) -> subprocess.CompletedProcess:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**self.environment, **environment})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(none)"


def _this_node() -> str:
    """slurm.conf's node line for this machine: `slurmd -C`'s CPUs, sockets, cores, threads and
    memory, under the name NODE."""
    try:
        described = subprocess.run([shutil.which("slurmd", path=SEARCH_PATH) or "slurmd", "-C"],
                                   capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        skip_unless_required("slurm", f"slurmd -C did not describe this machine: {error}")
    line = next((line for line in described.stdout.splitlines() if line.startswith("NodeName=")), None)
    if described.returncode or line is None:
        skip_unless_required("slurm", f"slurmd -C did not describe this machine: {described.stderr.strip()}")
    return " ".join([f"NodeName={NODE}", *line.split()[1:], "State=UNKNOWN"])


def _configuration(folder: Path, user: str, node: str) -> str:
    return "\n".join([
        "ClusterName=benchbase",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'munge' / 'socket'}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        "KillWait=5",
        "MailProg=/bin/true",
        node,
        "PartitionName=benchbase Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _start(name: str, arguments: list[str], folder: Path, environment: dict[str, str]) -> subprocess.Popen:
    """``name`` in the foreground, its output in log/NAME.out. Through util-linux's setpriv where
    there is one, it gets SIGTERM if this process dies before the fixture's teardown (setpriv sets
    the signal and execs the daemon; a preexec_fn would fork this process, with JAX's threads)."""
    guard = [setpriv, "--pdeathsig", "TERM", "--"] if (setpriv := shutil.which("setpriv", path=SEARCH_PATH)) else []
    with open(folder / "log" / f"{name}.out", "w") as log:
        return subprocess.Popen([*guard, shutil.which(name, path=SEARCH_PATH) or name, *arguments],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                cwd=folder)


def _wait_until(ready, daemons: dict[str, subprocess.Popen], folder: Path, what: str) -> None:
    """Polls ``ready()`` until it holds; skips (naming the daemon and its log) when a daemon exits
    or COMES_UP_WITHIN passes first."""
    deadline = time.monotonic() + COMES_UP_WITHIN
    while not ready():
        for name, process in daemons.items():
            if process.poll() is not None:
                skip_unless_required("slurm", f"{name} exited with {process.returncode} before {what}:\n"
                                     f"{_tail(folder / 'log' / f'{name}.out')}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {name}\n{_tail(folder / 'log' / f'{name}.out', 10)}" for name in daemons)
            skip_unless_required("slurm", f"no {what} within {COMES_UP_WITHIN:.0f} s:\n{logs}")
        time.sleep(0.5)


def _node_is_idle(cluster: Cluster) -> bool:
    try:
        states = cluster.run("sinfo", "--noheader", "--Node", "--format=%T", timeout=20).stdout.split()
    except subprocess.TimeoutExpired:
        return False
    return states == ["idle"]


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[Cluster]:
    """A one-node cluster on this machine, running until the module's tests are done."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name, path=SEARCH_PATH) is None]
    if missing:
        skip_unless_required("slurm", f"Slurm or munge is not installed ({', '.join(missing)} missing; Debian: "
                             "apt-get install slurm-wlm munge)")
    user = pwd.getpwuid(os.getuid()).pw_name
    node = _this_node()
    # A short path of its own: munged's socket path may not exceed 107 bytes, and munged wants
    # the socket's folder open to everyone (which pytest's own temporary folders are not).
    folder = Path(tempfile.mkdtemp(prefix="benchbase-slurm-"))
    folder.chmod(0o755)
    for name in ("munge", "state", "spool", "log"):
        (folder / name).mkdir(mode=0o755)
    key = folder / "munge" / "munge.key"
    key.touch(mode=0o600)
    key.write_bytes(os.urandom(1024))
    configuration = folder / "slurm.conf"
    configuration.write_text(_configuration(folder, user, node))
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}  # a job around pytest
    environment.update(SLURM_CONF=str(configuration), PATH=SEARCH_PATH)
    cluster = Cluster(folder, environment, cpus=int(re.search(r"\bCPUs=(\d+)", node).group(1)))
    daemons: dict[str, subprocess.Popen] = {}
    try:
        daemons["munged"] = _start("munged", [
            "--foreground", "--force", f"--socket={folder / 'munge' / 'socket'}", f"--key-file={key}",
            f"--pid-file={folder / 'munge' / 'munged.pid'}", f"--seed-file={folder / 'munge' / 'munged.seed'}",
            f"--log-file={folder / 'log' / 'munged.log'}"], folder, environment)
        _wait_until(lambda: (folder / "munge" / "socket").exists(), daemons, folder, "munged's socket")
        daemons["slurmctld"] = _start("slurmctld", ["-D", "-f", str(configuration)], folder, environment)
        daemons["slurmd"] = _start("slurmd", ["-D", "-N", NODE, "-f", str(configuration)], folder, environment)
        _wait_until(lambda: _node_is_idle(cluster), daemons, folder, f"idle node {NODE!r} in sinfo")
        yield cluster
    finally:
        _stop(cluster, daemons)
        shutil.rmtree(folder, ignore_errors=True)


def _stop(cluster: Cluster, daemons: dict[str, subprocess.Popen]) -> None:
    """Cancels every job, stops the daemons (slurmd, slurmctld, munged) and ends whatever a job left."""
    if all(daemons.get(name) is not None and daemons[name].poll() is None for name in ("slurmctld", "slurmd")):
        try:
            jobs = cluster.run("squeue", "--noheader", "--format=%i", timeout=20).stdout.split()
            if jobs:
                cluster.run("scancel", *jobs, timeout=20)
                deadline = time.monotonic() + 30
                while cluster.run("squeue", "--noheader", "--format=%i", timeout=20).stdout.split() \
                        and time.monotonic() < deadline:
                    time.sleep(0.5)
        except subprocess.TimeoutExpired:
            pass  # the daemons are stopped below all the same, and the job's processes with them
    for process in reversed(list(daemons.values())):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
    # slurmstepd and a job's processes leave slurmd's process tree; each carries SLURM_CONF in its environment.
    configuration = cluster.environment["SLURM_CONF"]
    leftovers = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get("SLURM_CONF") == configuration:
                leftovers.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for process in leftovers:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(leftovers, timeout=10)


def _job(cluster: Cluster, job: str) -> dict[str, str]:
    shown = cluster.run("scontrol", "--oneliner", "show", "job", job, timeout=20).stdout
    return dict(re.findall(r"\b(JobState|Reason|ExitCode)=(\S+)", shown))


def test_the_batch_script_trains_across_a_real_allocation(slurm_cluster, small_store, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed")
    if not (Path(sys.prefix) / "bin" / "torchrun").exists():
        skip_unless_required("slurm", f"no torchrun in {sys.prefix}/bin, where the script looks (VENV)")
    out, output = tmp_path / "run", tmp_path / "job.out"
    knobs = {"WORKLOAD": "ds2-mini", "BACKEND": "torch", "HW": "cpu2", "DATA": str(small_store), "SEED": "0",
             "OUT": str(out), "GPUS_PER_NODE": "2", "PROCS_PER_NODE": "2", "RDZV_PORT": str(_free_port()),
             "VENV": sys.prefix}
    # The allocation's options override the script's #SBATCH lines for this node: one node, all of
    # its CPUs, and no GPUs (Slurm refuses --gpus-per-node=4 where no node has a GPU). The cpu2
    # profile's two devices are two CPU processes, so GPUS_PER_NODE=2 gives --devices 2.
    submitted = slurm_cluster.run(
        "sbatch", "--parsable", "--nodes=1", f"--cpus-per-task={slurm_cluster.cpus}", "--gpus-per-node=0",
        f"--output={output}", f"--chdir={tmp_path}", "--export=ALL", str(SBATCH),
        "--max-epochs", "1", "--no-final-eval", **knobs)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]

    submitted_at = time.monotonic()
    while (state := _job(slurm_cluster, job)).get("JobState") not in ENDED:
        waited = time.monotonic() - submitted_at
        if state.get("JobState") == "PENDING" and waited > JOB_STARTS_WITHIN:
            skip_unless_required("slurm", f"job {job} still pending after {waited:.0f} s ({state.get('Reason')}): "
                                 "the cluster does not start jobs here")
        assert waited < JOB_ENDS_WITHIN, f"job {job} still {state} after {waited:.0f} s:\n{_tail(output, 80)}"
        time.sleep(1)
    if not output.exists():
        skip_unless_required("slurm", f"job {job} ended {state} without starting its script (slurmd could not "
                             f"launch it here):\n{_tail(slurm_cluster.folder / 'log' / 'slurmd.out')}")
    assert (state["JobState"], state.get("ExitCode")) == ("COMPLETED", "0:0"), \
        f"job {job} ended {state}:\n{_tail(output, 80)}"

    assert (out / "result.json").exists(), _tail(output, 80)
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["world_size"] == 2 and len(result["devices"]) == 2
    assert (result["status"], result["stop_reason"]) == ("aborted", "max_epochs")
