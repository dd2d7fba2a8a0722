"""Node 0's ssh to the other nodes, checked before a head-only launcher (mpirun, DeepSpeed over
pdsh, horovodrun) starts: the same ssh options the launcher gets, one message naming every node
node 0 cannot reach. Unit tests with a fake ``command``, then real sshd on 127.0.0.x."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from dtrun.cluster.peers import PEER_SSH, PeerSshError, check_peers, check_script
from dtrun.engines.embedded.inventory import local_cluster
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.execute import Answer
from dtrun.spec.cluster import Inventory, SshAccess
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import Program, ProgramKind, RunSpec
from tests import sshd
from tests.conftest import require_tool
from tests.e2e.test_ssh import PYTHON_BIN
from tests.plans import build_run_plan
from tests.stubs import StubCluster, option

SSH = SshAccess(port=2222, identity_file="/keys/id_ed25519", known_hosts_file="/keys/known_hosts")
PROGRAM = Program(ProgramKind.SCRIPT, "train.py")


def ssh_cluster(nodes: int = 3, ssh: SshAccess | None = SSH, python_bin: str = "/opt/venv/bin"):
    cluster = local_cluster(nodes, python_bin=python_bin, code_dir="/opt/dtrun", cpu_count=4)
    return replace(cluster, ssh=ssh)


def plan_of(launcher: str, inventory: Inventory, nodes: int | None = None) -> LaunchPlan:
    count = nodes or len(inventory.nodes)
    return build_run_plan(inventory, RunSpec("peers", PROGRAM, nodes=count, launcher=launcher))


class FakeCommand:
    """Answers the check script with ``output``, and keeps every script it was given."""

    def __init__(self, output: str = "", exit_code: int = 0, error: str | None = None) -> None:
        self.answer = Answer(output, exit_code, error)
        self.calls: list[dict[str, str]] = []

    def __call__(self, scripts: dict[str, str]) -> dict[str, Answer]:
        self.calls.append(scripts)
        return dict.fromkeys(scripts, self.answer)


# What each launcher's own ssh is given, read from how its stub was called (tests/stubs.py).
# OpenMPI and pdsh split their option strings at spaces, without quoting.
def mpirun_ssh(argv: list[str], env: dict[str, str]) -> list[str]:
    return argv[argv.index("plm_rsh_args") + 1].split()  # OpenMPI: ssh <plm_rsh_args>


def deepspeed_ssh(argv: list[str], env: dict[str, str]) -> list[str]:
    # pdsh: ssh ... $PDSH_SSH_ARGS_APPEND, to which DeepSpeed's PDSHRunner adds -p --ssh_port
    return [*env["PDSH_SSH_ARGS_APPEND"].split(), "-p", option(argv, "--ssh_port")]


def horovodrun_ssh(argv: list[str], env: dict[str, str]) -> list[str]:
    # horovodrun's ssh is horovod-ssh.sh, first on node 0's PATH: OpenSSH's options are the
    # words of its exec line, up to Horovod's own ConnectTimeout.
    shim = Path(env["PATH"].split(":")[0]) / "ssh"
    assert shim.resolve().name == "horovod-ssh.sh"
    line = shim.read_text().split("\nexec ")[1].replace("\\\n", " ")
    words = shlex.split(line.splitlines()[0])
    assert words[0].startswith("${DTRUN_REAL_SSH") and words[1:3] == ["-o", "BatchMode=yes"]
    return words[3 : words.index("${timeout[@]}")]


LAUNCHER_SSH = {"mpirun": mpirun_ssh, "deepspeed": deepspeed_ssh, "horovodrun": horovodrun_ssh}


@pytest.mark.parametrize("launcher", sorted(LAUNCHER_SSH))
def test_the_check_uses_the_ssh_options_the_launcher_is_given(tmp_path, launcher):
    stubs = StubCluster(tmp_path)
    plan = plan_of(launcher, ssh_cluster(2, python_bin=str(stubs.bin)))
    stubs.run_scripts(plan)
    [call] = stubs.calls(launcher)
    given = LAUNCHER_SSH[launcher](call.argv, call.env)
    assert list(PEER_SSH[launcher](SSH).options) == given
    script = check_script(plan, PEER_SSH[launcher](SSH))
    assert f"ssh_options=({' '.join(shlex.quote(word) for word in given)})" in script


def test_every_head_only_launcher_is_checked():
    inventory = ssh_cluster(2)
    head_only = {
        launcher
        for launcher in ("torchrun", "deepspeed", "horovodrun", "mpirun", "tensorflow")
        if len(plan_of(launcher, inventory).launches) == 1
    }
    assert head_only == set(PEER_SSH)


def test_the_check_script_is_golden_valid_bash_and_shellcheck_clean(tmp_path, golden):
    plan = plan_of("mpirun", ssh_cluster(3))
    script = check_script(plan, PEER_SSH["mpirun"](SSH))
    golden("remote/peers-mpirun.sh", script)
    path = tmp_path / "peers.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    shellcheck = require_tool("shellcheck")
    done = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=style", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout


def test_node_0_alone_checks_every_other_node_and_passes_when_all_answer():
    command = FakeCommand("dtrun-peer 1 ok\ndtrun-peer 2 ok\n")
    check_peers(command, ssh_cluster(3), plan_of("mpirun", ssh_cluster(3)))
    [scripts] = command.calls
    assert list(scripts) == ["node-0"]
    assert "peer 1 127.0.0.3 &" in scripts["node-0"] and "peer 2 127.0.0.4 &" in scripts["node-0"]
    assert "peer 0 " not in scripts["node-0"]  # OpenMPI starts node 0's ranks itself


def test_pdsh_logs_into_node_0_too_even_on_one_node():
    command = FakeCommand("dtrun-peer 0 ok\n")
    check_peers(command, ssh_cluster(1), plan_of("deepspeed", ssh_cluster(1)))
    [scripts] = command.calls
    assert "peer 0 127.0.0.2 &" in scripts["node-0"]


@pytest.mark.parametrize(
    ("launcher", "inventory", "nodes"),
    [
        ("torchrun", ssh_cluster(2), 2),  # every node runs its own script
        ("mpirun", ssh_cluster(2, ssh=None), 2),  # the embedded cluster: no ssh at all
        ("mpirun", ssh_cluster(2), 1),  # no other node
    ],
    ids=["torchrun", "embedded-mpirun", "one-node-mpirun"],
)
def test_nothing_is_checked_where_no_node_is_reached_over_ssh(launcher, inventory, nodes):
    command = FakeCommand()
    check_peers(command, inventory, plan_of(launcher, inventory, nodes))
    assert command.calls == []


def test_every_node_that_node_0_cannot_reach_is_named_with_ssh_s_words():
    inventory = ssh_cluster(4)
    command = FakeCommand(
        "dtrun-peer 2 ok\n"
        "dtrun-peer 1 failed 255 Host key verification failed.\n"
        "dtrun-peer 3 failed 124 \n"
    )
    with pytest.raises(PeerSshError) as caught:
        check_peers(command, inventory, plan_of("horovodrun", inventory))
    error = caught.value
    assert error.exit_code == 2
    assert error.message.startswith(
        "node-0 cannot ssh to 2 of 3 nodes that horovodrun starts ranks on: "
        "node-1 (127.0.0.3): Host key verification failed.; "
        "node-3 (127.0.0.5): no answer in 30 s"
    )
    assert "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes" in error.message
    assert "--launcher torchrun" in error.message


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (FakeCommand("dtrun-peer 1 ok\n", exit_code=137), "no answer (the check ended with "),
        (FakeCommand("dtrun-peer 1 ok\ndtrun-peer 2 failed 255 \n"), "ssh exited with 255"),
        (FakeCommand("dtrun-peer-no-ssh\n"), "ssh is not installed on node-0"),
        (FakeCommand(error="lost the connection"), "not checked: lost the connection"),
    ],
    ids=["script-killed", "ssh-said-nothing", "no-ssh", "node-0-lost"],
)
def test_a_check_that_says_nothing_clear_still_names_the_node(answer, reason):
    inventory = ssh_cluster(3)
    with pytest.raises(PeerSshError, match="node-2 \\(127.0.0.4\\): " + reason.replace("(", "\\(")):
        check_peers(answer, inventory, plan_of("mpirun", inventory))


# -- real sshd: node 0 on 127.0.0.47, the others on 127.0.0.48-49, port 2247 -------------------

PORT = 2247
DOWN = "127.0.0.50"  # no sshd there


@pytest.fixture(scope="module")
def peer_cluster(tmp_path_factory):
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    require_tool("ssh")
    cluster = sshd.start_cluster(tmp_path_factory.mktemp("peers"), 3, PORT, first=47)
    yield cluster
    cluster.close()


def loopback_hosts(cluster, tmp_path, addresses, known_hosts) -> Inventory:
    """The hosts file's key, port and known_hosts are what node 0's ssh is given too."""
    text = (
        f"user: {cluster.user}\nport: {PORT}\nkey: {cluster.key}\n"
        f"known_hosts: {known_hosts}\ncpus: 1\ninterface: lo\nworkdir: {tmp_path}\n"
        f"hosts: [{', '.join(addresses)}]\n"
    )
    return parse_hosts_file(text, "hosts.yaml", Defaults(cluster.user, PYTHON_BIN))
