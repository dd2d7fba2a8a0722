"""No value from outside becomes a command: the property, for every launcher's scripts.

Hypothesis draws hostile strings (any text, and text around shell and comment breakers that
would create a marker file) and puts one in one field of a launch at a time: a program
argument, an --env value, a node's address, the code directory, the run id, the network
interface, the SSH key path. Every rendered script and launch file must then either be refused
with one of dtrun's own errors (never for a program argument or an --env value, which dtrun
takes whatever they hold) or pass `bash -n` and run, against stub launchers, without the
marker ever appearing, and hand the value to the process byte for byte.

Every other template (cloud-init, Slurm, remote scripts) is held to the same rule at the place
values land: tests/unit/test_template_values.py.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dtrun.engines.embedded.inventory import local_cluster
from dtrun.errors import DtrunError, UnsafeValueError
from dtrun.render import shquote
from dtrun.spec.cluster import Inventory, SshAccess
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import (
    HorovodController,
    LauncherOptions,
    Program,
    ProgramKind,
    Rendezvous,
    RunSpec,
    TfStrategy,
)
from tests.paths import TESTS
from tests.plans import build_run_plan
from tests.stubs import (
    Player,
    StubCluster,
    play_deepspeed_pdsh,
    play_horovodrun,
    play_mpirun,
)

# One marker for the whole module: hostile values try to create it, and nothing ever may.
MARKER_DIR = Path(tempfile.mkdtemp(prefix="dtrun-inject-"))
atexit.register(shutil.rmtree, MARKER_DIR, ignore_errors=True)  # no directory left in /tmp
MARKER = MARKER_DIR / "PWNED"
_M = str(MARKER)

# What breaks a shell word, a quoted string, a comment line, a here-doc or an option list.
BREAKERS = (
    f"$(touch {_M})",
    f"`touch {_M}`",
    f"'; touch {_M}; '",
    f'"; touch {_M}; "',
    f"\ntouch {_M}\n",
    f"\ntouch {_M} #",
    f"\r\ntouch {_M}\n",
    f"\u2028touch {_M}",
    f"'\"$(touch {_M})\"'",
    f"\\'; touch {_M} #",
    f"-oProxyCommand=touch {_M}",
    f"--rdzv-endpoint=$(touch {_M})",
    "${IFS}*?[a]~!{x,y}",
    "{{ x }}{% raw %}",
    "\x1b[31m\x7f\x85",
)
hostile = st.one_of(
    st.text(max_size=24),
    st.builds(
        lambda before, breaker, after: before + breaker + after,
        st.text(max_size=6),
        st.sampled_from(BREAKERS),
        st.text(max_size=6),
    ),
)

SSH = SshAccess(port=2222, identity_file="/keys/id_ed25519")


@dataclass(frozen=True)
class Case:
    launcher: str
    options: LauncherOptions
    ssh: SshAccess | None
    player: Player | None  # head-only launchers: what it does for every process
    procs: int = 2


CASES = {
    "torchrun-c10d": Case("torchrun", LauncherOptions(), None, None),
    "torchrun-static": Case("torchrun", LauncherOptions(rendezvous=Rendezvous.STATIC), None, None),
    "deepspeed-no-ssh": Case("deepspeed", LauncherOptions(), None, None),
    "tensorflow": Case("tensorflow", LauncherOptions(), None, None, procs=1),
    "tensorflow-ps": Case(
        "tensorflow",
        LauncherOptions(tf_strategy=TfStrategy.PARAMETER_SERVER, tf_ps=1),
        None,
        None,
        procs=1,
    ),
    "mpirun-embedded": Case("mpirun", LauncherOptions(), None, play_mpirun),
    "mpirun-ssh": Case("mpirun", LauncherOptions(), SSH, play_mpirun),
    "horovodrun-gloo": Case("horovodrun", LauncherOptions(), SSH, play_horovodrun),
    "horovodrun-mpi": Case(
        "horovodrun",
        LauncherOptions(horovod_controller=HorovodController.MPI),
        None,
        play_horovodrun,
    ),
    "deepspeed-pdsh": Case("deepspeed", LauncherOptions(), SSH, play_deepspeed_pdsh),
}
FIELDS = ("arg", "env", "address", "code_dir", "run_id", "interface", "key")


def _launch(case: Case, stubs: StubCluster, field: str, value: str) -> LaunchPlan:
    cluster = local_cluster(2, python_bin=str(stubs.bin), code_dir="/opt/dtrun", cpu_count=4)
    ssh = case.ssh
    if field == "key" and ssh is not None:
        ssh = replace(ssh, identity_file=value)
    inventory: Inventory = replace(cluster, ssh=ssh)
    if field == "address":
        second = replace(inventory.nodes[1], address=value)
        inventory = replace(inventory, nodes=(inventory.nodes[0], second))
    if field in ("code_dir", "interface"):
        inventory = replace(inventory, **{field: value})  # type: ignore[arg-type]
    spec = RunSpec(
        value if field == "run_id" else "stub",
        Program(ProgramKind.SCRIPT, "train.py", (value,) if field == "arg" else ("plain",)),
        nodes=2,
        procs_per_node=case.procs,
        launcher=case.launcher,
        env=(("WANDB_PROJECT", value if field == "env" else "a test"),),
        launch=case.options,
    )
    return build_run_plan(inventory, spec)


def _parses(plan: LaunchPlan, workdir: Path) -> None:
    shell_files = [launch.script for launch in plan.launches]
    shell_files += [file.content for file in plan.files if file.content.startswith("#!")]
    for text in shell_files:
        done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert done.returncode == 0, f"bash -n: {done.stderr}\n{text}"


def _processes(case: Case, stubs: StubCluster, plan: LaunchPlan) -> list[dict[str, object]]:
    """What every process (or, for per-node launchers, every node's launcher) was given."""
    if case.player is None:
        name = "python" if case.launcher == "tensorflow" else case.launcher
        return [{"argv": c.argv, "env": c.env} for c in stubs.calls(name)]
    [head] = stubs.calls(case.launcher)
    for argv, env in case.player(head, plan):
        stubs.run_wrapper(argv, env)
    return [{"argv": c.argv, "env": c.env} for c in stubs.calls("python")]


def _check_read_back(field: str, value: str, seen: list[dict[str, object]]) -> None:
    assert seen, "no process was started"
    for process in seen:
        argv, env = process["argv"], process["env"]
        assert isinstance(argv, list) and isinstance(env, dict)
        if field == "arg":
            assert argv[-1] == value
        if field == "env":
            assert env["WANDB_PROJECT"] == value
        if field == "code_dir":
            assert env["PYTHONPATH"].startswith(value + ":") or env["PYTHONPATH"] == value
    if field == "address":
        assert value in {process["env"]["DTRUN_NODE_ADDR"] for process in seen}  # type: ignore[index]


# Values dtrun takes whatever they hold; a launcher's own file format may still refuse some
# (.deepspeed_env is one line a variable; `$` and backquotes are expanded by pdsh's shell).
_ALWAYS_TAKEN = {"arg", "env"}
_FORMAT_LIMITS = {("deepspeed-pdsh", "env")}


@pytest.mark.parametrize("case_name", list(CASES))
@settings(
    max_examples=int(os.environ.get("DTRUN_INJECTION_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(field=st.sampled_from(FIELDS), value=hostile)
@example(field="env", value="0\x850")  # NEL: a line break to splitlines, not to DeepSpeed
def test_no_hostile_value_in_any_field_runs_a_command_and_each_reads_back_exactly(
    case_name, field, value, tmp_path_factory
):
    case = CASES[case_name]
    stubs = StubCluster(tmp_path_factory.mktemp("inject"))
    try:
        plan = _launch(case, stubs, field, value)
    except DtrunError as refused:
        # Refused at input is a right answer, but not for what users may pass as they like,
        # except where a launcher's own format cannot carry it; and never with a traceback.
        allowed = field not in _ALWAYS_TAKEN or (case_name, field) in _FORMAT_LIMITS
        assert allowed or "\x00" in value, f"{field}={value!r} refused: {refused}"
        assert not MARKER.exists()
        return
    _parses(plan, stubs.workdir)
    stubs.run_scripts(plan)
    seen = _processes(case, stubs, plan)
    assert not MARKER.exists(), f"{field}={value!r} ran a command"
    _check_read_back(field, value, seen)


def test_a_nul_byte_is_refused_by_the_quoting_itself():
    # A shell script cannot carry NUL (bash drops it), so no quoting could read it back.
    with pytest.raises(UnsafeValueError, match="NUL"):
        shquote("a\x00b")


# --- Refused at input: each source of hosts, addresses and names says where the value was. ---

YAML_BAD = [
    ('hosts:\n  - host: 127.0.0.61\n    address: "127.0.0.61\\ntouch /tmp/p #"\n', 3, "address"),
    ('hosts:\n  - host: "127.0.0.61\\ntouch /tmp/p #"\n', 2, "host"),
    ('hosts:\n  - "a\\rb"\n', 2, "host"),
    ('hosts:\n  - host: a\n    user: "me\\u2028x"\n', 3, "user"),
    ('user: "$(touch /tmp/p)"\nhosts: [a]\n', 1, "user"),
    ('hosts:\n  - host: "-oProxyCommand=touch /tmp/p"\n', 2, "host"),
    ('hosts:\n  - host: "a;b"\n', 2, "host"),
    ('jump: "admin@head\\ntouch /tmp/p"\nhosts: [a]\n', 1, "jump"),
    ('jump: "admin@head name"\nhosts: [a]\n', 1, "jump"),
    ('python: "/opt/v\\x1b[2Jbin"\nhosts: [a]\n', 1, "python"),
    ('workdir: "/tmp/x\\ny"\nhosts: [a]\n', 1, "workdir"),
    ('interface: "eth0\\n"\nhosts: [a]\n', 1, "interface"),
    # Python's ipaddress takes any zone after '%': these reached hostfiles and -H lists whole
    ('hosts:\n  - "fe80::2%b slots=64,evil:8"\n', 2, "host"),
    ('hosts:\n  - host: "fe80::1%$(id)`id`"\n', 2, "host"),
    ('hosts:\n  - host: a\n    address: "fe80::1%a;b"\n', 3, "address"),
]


@pytest.mark.parametrize(("text", "line", "field"), YAML_BAD)
def test_a_yaml_hosts_value_that_could_break_a_script_is_refused_naming_line_and_field(
    text, line, field
):
    from dtrun.engines.ssh.hostlines import HostsFileError
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file

    with pytest.raises(HostsFileError) as refused:
        parse_hosts_file(text, "hosts.yaml", Defaults(user="me", python_bin="/v/bin"))
    assert f"hosts.yaml, line {line}: '{field}'" in refused.value.message
    assert refused.value.exit_code == 2


def test_a_jump_host_with_a_password_is_refused_without_printing_it():
    from dtrun.engines.ssh.hostlines import HostsFileError
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file

    text = 'jump: "bob:S3cretPw@head"\nhosts: [a]\n'
    with pytest.raises(HostsFileError) as refused:
        parse_hosts_file(text, "hosts.yaml", Defaults(user="me", python_bin="/v/bin"))
    assert "S3cretPw" not in refused.value.message
    assert "holds a password" in refused.value.message


@pytest.mark.parametrize(
    "text",
    [
        "a$(touch${IFS}/tmp/p) slots=1\n",
        "`id` slots=2\n",
        "a\x1b[2J slots=1\n",
        "-x\n",
        "fe80::1%$(id) slots=1\n",  # an IPv6 zone is an interface's name, no more
    ],
)
def test_an_mpi_hostfile_host_that_is_no_host_name_is_refused_naming_the_line(text):
    from dtrun.engines.ssh.hostlines import HostsFileError
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file

    with pytest.raises(HostsFileError, match=r"hostfile, line 1: the host"):
        parse_hosts_file(text, "hostfile", Defaults(user="me", python_bin="/v/bin"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("head_public_address", "20.0.0.1\ntouch /tmp/p"),
        ("head_public_address", "$(touch /tmp/p)"),
        ("ssh_user", "azureuser;id"),
        ("mount_path", "/shared\n"),
        ("python_bin", "/shared/.dtrun/venv/bin\x1b"),
    ],
)
def test_stack_outputs_with_a_control_character_or_a_bad_name_are_refused(key, value):
    import json

    from dtrun.cluster.outputs import OutputsError, parse_outputs

    data = json.loads((TESTS / "data/outputs/v4-h100-azurefiles-created.json").read_text())
    data[key] = value
    with pytest.raises(OutputsError, match=f"'{key}'") as refused:
        parse_outputs(data, "outputs.json")
    assert refused.value.exit_code == 2


def test_a_known_hosts_line_with_a_line_break_in_the_outputs_is_refused():
    import json

    from dtrun.cluster.outputs import OutputsError, parse_outputs

    data = json.loads((TESTS / "data/outputs/v4-h100-azurefiles-created.json").read_text())
    data["known_hosts"] = ["10.0.0.4 ssh-ed25519 AAAA\n10.0.0.5 ssh-ed25519 BBBB"]
    with pytest.raises(OutputsError, match="'known_hosts' holds a control character"):
        parse_outputs(data, "outputs.json")


def test_a_slurm_node_address_that_is_no_address_is_refused():
    from dtrun.engines.slurm.allocation import slurm_nodes
    from dtrun.errors import InventoryError

    class Sinfo:
        def check(self, command: list[str], doing: str) -> str:
            return "g1|10.0.0.4;touch /tmp/p|16|(null)\n"

    with pytest.raises(InventoryError, match="Slurm gives node g1 the address"):
        slurm_nodes(Sinfo(), ["g1"])  # type: ignore[arg-type]


def test_a_node_name_sinfo_lists_for_a_dry_run_is_checked_as_a_job_s_are():
    """Outside an allocation a dry run takes its nodes from `sinfo -N -o %N`; a name there
    that is no node name is refused, as `scontrol show hostnames` names are."""
    from dtrun.engines.slurm.allocation import candidate_nodes
    from dtrun.errors import InventoryError
    from dtrun.spec.slurmrequest import SlurmRequest

    class Sinfo:
        def check(self, command: list[str], doing: str) -> str:
            return "g1\n../../home/u/.bashrc\n"

    with pytest.raises(InventoryError, match=r"Slurm node name '\.\./\.\./home/u/\.bashrc'"):
        candidate_nodes(Sinfo(), SlurmRequest())  # type: ignore[arg-type]


def test_the_issue_s_hosts_file_is_refused_by_the_dry_run_before_any_file_is_written(tmp_path):
    from tests.conftest import run_dtrun

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        'hosts:\n  - address: "127.0.0.61\\ntouch /tmp/pwned #"\n    host: 127.0.0.61\n'
    )
    done = run_dtrun("bench", "--hosts", str(hosts), "--nodes", "1", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "hosts.yaml, line 2: 'address' holds a control character (\\n)" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
