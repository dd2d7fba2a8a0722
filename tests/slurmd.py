"""A real Slurm cluster on this machine: Debian's munged, one slurmctld and two slurmd.

The configuration is the one shown to work on this kind of machine (docs/slurm.md, "Testing",
from ../shared/slurm/one-machine.conf), with one change: each slurmd runs in a UTS namespace of
its own whose host name is its node's name, so that every node has a host name of its own as on
a real cluster (OpenMPI and `hostname` see n1 and n2, not this machine's name twice), and a
mount namespace whose /etc/hosts also names both nodes, so that each resolves the other's name.
Nodes listen on 127.0.0.21 and 127.0.0.22; each has one CPU.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.paths import require_e2e

ENABLE = (
    "install Slurm and munge as root (`apt-get install slurmctld slurmd slurm-client munge`; "
    "`./dev test` does it)"
)
NODES = {"n1": ("127.0.0.21", 6818), "n2": ("127.0.0.22", 6819)}
CTLD_PORT = 6817
TOOLS = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "sbatch", "unshare")


def missing() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    if os.geteuid() != 0:
        return f"slurmd runs as root and these tests run as uid {os.geteuid()}"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    return f"{', '.join(absent)} not installed: {ENABLE}" if absent else None


def _conf(root: Path) -> str:
    host = socket.gethostname().split(".")[0]
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={name} NodeAddr={address} Port={port} CPUs=1 State=UNKNOWN"
        for name, (address, port) in NODES.items()
    )
    return f"""\
ClusterName=dtrunci
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={CTLD_PORT}
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=5
{nodes}
PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
TmpFS={root}/tmp/%n
"""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started_munged: bool = False

    @property
    def env(self) -> Mapping[str, str]:
        """This environment, outside any allocation, with this cluster's configuration."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, *command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def jobs(self) -> list[str]:
        """`JOBID STATE NAME` of every job squeue lists (pending, running, completing)."""
        return self.run("squeue", "-h", "-o", "%i %T %j").stdout.split("\n")[:-1]

    def steps(self) -> list[str]:
        return self.run("squeue", "-h", "-s", "-o", "%i %j").stdout.split("\n")[:-1]

    def reset(self) -> None:
        """No job left, every node idle: the state each test starts from."""
        self.run("scancel", "--user", "root")
        deadline = time.monotonic() + 30
        while self.jobs() or not self._all_idle():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test Slurm cluster did not settle: {self.jobs()}")
            time.sleep(0.2)

    def _all_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%T").stdout.split()
        if any(state.startswith(("down", "drain")) for state in states):
            for name in NODES:
                self.run("scontrol", "update", f"nodename={name}", "state=resume")
        return bool(states) and all(state == "idle" for state in states)

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's slurmd (its steps' slurmstepd live on, as on a real node)."""
        index = 1 + list(NODES).index(name)
        self.processes[index].kill()
        self.processes[index].wait()

    def freeze_node(self, name: str) -> list[int]:
        """SIGSTOP every process of the node, as a host that hangs: its slurmd, the slurmstepd
        it forked and their tasks, which all live in its UTS namespace (and nothing else
        does). The stopped pids, slurmd first; ``kill_frozen`` ends them."""
        import signal

        stopped = []
        for proc in self.node_processes(name):
            with contextlib.suppress(psutil.Error):  # one that ended meanwhile
                proc.send_signal(signal.SIGSTOP)
                stopped.append(proc.pid)
        return stopped

    def node_processes(self, name: str) -> list[psutil.Process]:
        """Every process of the node, slurmd first: those in its UTS namespace, which its
        slurmd, the slurmstepd it forks (reparented away from slurmd: not its children) and
        their tasks share, and nothing else does."""
        slurmd = self.processes[1 + list(NODES).index(name)].pid
        uts = Path(f"/proc/{slurmd}/ns/uts").readlink()
        found: list[psutil.Process] = []
        for proc in [psutil.Process(slurmd), *psutil.process_iter()]:
            with contextlib.suppress(OSError, psutil.Error):  # one that ended meanwhile
                if proc.pid not in {p.pid for p in found} and (
                    Path(f"/proc/{proc.pid}/ns/uts").readlink() == uts
                ):
                    found.append(proc)
        return found

    def kill_frozen(self, name: str, pids: list[int]) -> None:
        """The hung node gone: SIGKILL what ``freeze_node`` stopped; then restart_node."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        self.processes[1 + list(NODES).index(name)].wait(timeout=10)

    def restart_node(self, name: str) -> None:
        """Start the node's slurmd again (after kill_node) and wait until Slurm has it idle."""
        index = 1 + list(NODES).index(name)
        self.processes[index] = _node_daemon(self.root, self.env, name)
        self.run("scontrol", "update", f"nodename={name}", "state=resume")
        deadline = time.monotonic() + 60
        while not self._all_idle():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come back: {self.run('sinfo', '-N').stdout}")
            time.sleep(0.5)

    def close(self) -> None:
        """Cancel every job and let it end, then stop the node daemons, then the controller."""
        self.run("scancel", "--user", "root")
        deadline = time.monotonic() + 10
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)
        controller, *nodes = self.processes
        for group in (nodes, [controller]):
            for process in group:
                process.terminate()
            for process in group:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        _kill_stepds(self.root)
        if self.started_munged:
            subprocess.run(["pkill", "-x", "munged"], check=False)


def _kill_stepds(root: Path) -> None:
    """slurmstepd processes of this cluster that outlived their slurmd (a failed launch): they
    write this cluster's logs. (Their environment is overwritten by their process title.)"""
    for proc in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == "slurmstepd" and any(
                f.path.startswith(str(root)) for f in proc.open_files()
            ):
                proc.kill()


def _munge_works() -> bool:
    munge = subprocess.run(["munge", "-n"], capture_output=True, check=False)
    if munge.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=munge.stdout, capture_output=True).returncode == 0


def _ports_free() -> None:
    """Another Slurm on these ports would answer for this one (and its jobs would be ours)."""
    for address, port in [("127.0.0.1", CTLD_PORT), *NODES.values()]:
        with socket.socket() as probe:
            if probe.connect_ex((address, port)) == 0:
                raise RuntimeError(f"{address}:{port} is in use: is another Slurm running here?")


def _node_daemon(root: Path, env: Mapping[str, str], name: str) -> subprocess.Popen[bytes]:
    """The node's slurmd, with a host name of its own, as every real node has (see the
    module's docstring); unshare and sh exec it, so the process is slurmd itself."""
    bind = f"mount --bind {shlex.quote(str(root / 'hosts'))} /etc/hosts"
    line = f"hostname {name} && {bind} && exec slurmd -D -N {name}"
    with (root / "log" / f"slurmd-{name}.out").open("ab") as out:
        return subprocess.Popen(
            ["unshare", "--uts", "--mount", "sh", "-c", line],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def start(root: Path) -> SlurmCluster:
    require_e2e("a Slurm cluster")
    _ports_free()
    for sub in ("state", "log", *(f"spool/{n}" for n in NODES), *(f"tmp/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root))
    cluster = SlurmCluster(root, conf)
    if not _munge_works():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
        cluster.started_munged = True
    env = dict(cluster.env)
    logs = root / "log"

    def daemon(name: str, command: list[str]) -> None:
        with (logs / f"{name}.out").open("wb") as out:
            cluster.processes.append(
                subprocess.Popen(
                    command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            )

    daemon("slurmctld", ["slurmctld", "-D", "-i"])
    # Every node resolves every node's name, as a real cluster's DNS or /etc/hosts lets it
    # (Gloo, under Horovod, looks up the host name): this machine's /etc/hosts and the nodes,
    # bound over /etc/hosts in each node's own mount namespace only.
    hosts = root / "hosts"
    names = "".join(f"{address} {name}\n" for name, (address, _) in NODES.items())
    hosts.write_text(Path("/etc/hosts").read_text() + names)
    for name in NODES:
        cluster.processes.append(_node_daemon(root, env, name))
    deadline = time.monotonic() + 30
    while not cluster._all_idle():
        if time.monotonic() > deadline or any(p.poll() is not None for p in cluster.processes):
            cluster.close()
            said = "".join(p.read_text()[-500:] for p in logs.glob("*.out"))
            raise RuntimeError(f"the test Slurm cluster did not start: {said}")
        time.sleep(0.2)
    return cluster
