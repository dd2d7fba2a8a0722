from __future__ import annotations

import contextlib
import difflib
import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

import psutil
import pytest

from dtrun.engines.embedded.inventory import embedded_inventory, local_cluster
from dtrun.spec.cluster import Accelerator, Inventory, Node, SshAccess
from dtrun.spec.request import BenchSpec
from tests import machine, slurmd, sshd, torch_extensions
from tests.sshd import SshCluster

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

GOLDEN = Path(__file__).parent / "golden"
# -X faulthandler: a dtrun that hangs prints every thread's stack on SIGABRT (ends_within)
DTRUN = [sys.executable, "-X", "faulthandler", "-m", "dtrun.cli"]


# The suite's parts (docs/architecture.md, "What you do"): tests/unit/ runs in minutes with
# nothing but the venv; tests/e2e/ holds every test that starts a daemon (sshd, slurmd, Spark),
# a cluster, a real launch or a browser; tests/infra/ the Pulumi program's tests. Each test
# gets its part's marker from its directory.
PARTS = ("unit", "e2e", "infra")
# Fixtures that start daemons or real launches: only tests under tests/e2e/ may use them.
E2E_FIXTURES = frozenset({"sshd_cluster", "slurm_daemons", "slurm", "no_leftovers", "deepspeed_op"})


def _part(path: Path) -> str | None:
    parts = path.relative_to(Path(__file__).parent).parts
    return parts[0] if len(parts) > 1 and parts[0] in PARTS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        part = _part(item.path)
        if part is None:
            misplaced.append(f"{item.nodeid}: outside tests/unit, tests/e2e and tests/infra")
            continue
        if part != "e2e":
            daemons = sorted(E2E_FIXTURES & set(getattr(item, "fixturenames", ())))
            if item.get_closest_marker("e2e") is not None or daemons:
                why = f"uses {', '.join(daemons)}" if daemons else "is marked e2e"
                misplaced.append(f"{item.nodeid}: {why}, so it belongs in tests/e2e/")
        item.add_marker(part)
    if misplaced:
        raise pytest.UsageError("tests in the wrong part:\n" + "\n".join(misplaced))


_OWN_NETWORK = False  # this worker has a network namespace of its own (--worker-netns)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM and SIGHUP (a CI timeout, a closed terminal) stop the run as Ctrl-C does: pytest
    then tears the session down, and the session's sshd, Slurm and Spark daemons are stopped
    instead of left running on their addresses for the next run to trip on."""
    import signal

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _interrupted)
    # which test session a process belongs to: xdist names its workers gw0, gw1, ... in every
    # session, and several sessions share this machine (helpers, CI jobs); the leftover check
    # and the fault fixtures must never take another session's processes for their own
    os.environ.setdefault("DTRUN_TEST_SESSION", f"{os.getpid()}-{time.time_ns()}")
    torch_extensions.use_own_directory()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if config.getoption("--worker-netns") and worker is not None:
        _own_network(worker)
        global _OWN_NETWORK
        _OWN_NETWORK = True


@pytest.hookimpl(optionalhook=True)  # xdist's hook: there only under -n
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """--dist loadgroup: what the workers' network namespaces do not separate runs on one
    worker (tests/machine.py), in place of xdist's own loadgroup."""
    return machine.machine_groups(config, log) if config.getvalue("dist") == "loadgroup" else None


def _own_network(worker: str) -> None:
    """This xdist worker, and everything it starts, in a network namespace of its own with its
    own loopback: the e2e tests' sshd, torchrun rendezvous, Spark and Slurm addresses and ports
    are fixed, and two workers then each have them all (unshare(2), network_namespaces(7)).
    The main thread, which runs the tests, moves; execnet's thread talks over pipes and stays."""
    import ctypes

    clone_newnet = 0x40000000  # <sched.h>; os.unshare is Python 3.12's
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(clone_newnet) != 0:
        why = os.strerror(ctypes.get_errno())
        raise pytest.UsageError(
            f"--worker-netns: {worker} could not get a network namespace of its own ({why}): "
            "run as root, or run the e2e part without -n"
        )
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # and one address that is not 127.0.0.1 (RFC 2544's benchmarking range, on lo): glibc's
    # AI_ADDRCONFIG returns no IPv4 address where the only one is loopback's, and Slurm's
    # daemons ask with it for the address they listen on (slurmctld: "Unable to resolve")
    subprocess.run(["ip", "addr", "add", "198.18.0.1/32", "dev", "lo"], check=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--worker-netns",
        action="store_true",
        help="under -n, each worker in a network namespace of its own (root): how ./dev runs "
        "the e2e part on two workers",
    )
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/golden/ from the current output instead of comparing",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare text with tests/golden/NAME; --update-golden rewrites the file."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"{path} is missing: run pytest --update-golden"
        expected = path.read_text()
        if text != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(True), text.splitlines(True), str(path), "rendered"
                )
            )
            pytest.fail(f"{name} differs from its golden file (pytest --update-golden):\n{diff}")

    return check


@pytest.fixture
def fixed_inventory() -> Inventory:
    """An embedded-style inventory with fixed paths, so rendered scripts are reproducible."""
    return local_cluster(4, python_bin="/opt/dtrun/venv/bin", code_dir="/opt/dtrun", cpu_count=8)


def gpu_cluster(size: str, ssh: SshAccess, subnet: str) -> Inventory:
    """Four 8-GPU nodes of a catalog size, reached over ssh: a real cluster's inventory."""
    return Inventory(
        source="hosts:golden",
        nodes=tuple(Node(f"vm-{i}", f"{subnet}.{i + 4}", slots=8, cpus=96) for i in range(4)),
        python_bin="/shared/dtrun/venv/bin",
        code_dir="/shared/dtrun",
        accelerator=Accelerator.CUDA,
        size=size,
        ssh=ssh,
        interface="eth0",
    )


# The golden clusters: the embedded one (CPU) and two Azure sizes, each as 4 nodes.
CLUSTERS: dict[str, Inventory] = {
    "embedded": local_cluster(
        4, python_bin="/opt/dtrun/venv/bin", code_dir="/opt/dtrun", cpu_count=8
    ),
    "a100": gpu_cluster("Standard_ND96asr_v4", SshAccess(port=2222), "10.1.0"),
    "h100": gpu_cluster(
        "Standard_ND96isr_H100_v5",
        SshAccess(port=22, identity_file="/home/azureuser/.ssh/id_ed25519"),
        "10.2.0",
    ),
}


@pytest.fixture
def spec() -> BenchSpec:
    return BenchSpec(run_id="test-run")


@pytest.fixture
def live_inventory() -> Inventory:
    """The real embedded cluster of this machine."""
    return embedded_inventory(2)


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `./dev test` installs it (apt-get install {name})")
    return path


def processes_under(directory: Path) -> list[psutil.Process]:
    """Processes whose working directory is inside ``directory`` (every node process is), and
    which still run: a zombie has ended, and waits only for its parent (init, for an orphan,
    which in a container may be slow to reap it) to collect its exit status."""
    found = []
    root = str(directory.resolve())
    for proc in psutil.process_iter(["cwd", "status"]):
        cwd = proc.info.get("cwd")
        if proc.info.get("status") == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        if cwd and (cwd == root or cwd.startswith(root + os.sep)):
            found.append(proc)
    return found


def ended(pid: int) -> bool:
    """The process has exited: gone, or a zombie waiting for its parent to collect it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll until ``condition`` holds; a synchronisation point, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def ends_within(dtrun: subprocess.Popen[bytes], timeout: float, out: IO[str]) -> int:
    """dtrun's exit code once it ends. Past ``timeout`` the test fails with what dtrun said and
    where each of its threads was: SIGABRT, on which ``-X faulthandler`` (DTRUN) prints them."""
    import signal

    try:
        return dtrun.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        dtrun.send_signal(signal.SIGABRT)
        try:
            dtrun.wait(timeout=10)
        except subprocess.TimeoutExpired:
            dtrun.kill()
            dtrun.wait()
    out.flush()
    out.seek(0)
    said = out.read()[-8000:]
    pytest.fail(f"dtrun did not end within {timeout:g} s; it said, and its stacks:\n{said}")


def default_signals() -> None:
    """For a child dtrun: the signal dispositions and mask of a terminal's command, whatever
    this test run inherited (`nohup` ignores SIGHUP, a script's `&` SIGINT, and a thread that
    blocked a signal passes the block on to what it starts)."""
    import signal

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for signum in stops:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)


def run_dtrun(
    *args: str, cwd: Path, timeout: float = 240, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DTRUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        env=env,
    )  # fmt: skip


@pytest.fixture(scope="session")
def sshd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    """Four real sshd instances on 127.0.0.2 ... 127.0.0.5, port 2222, for the whole run."""
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    cluster = sshd.start_cluster(tmp_path_factory.mktemp("sshd"), count=4)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def slurm_daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmd.SlurmCluster]:
    """A real Slurm cluster (munged, slurmctld, two slurmd as n1 and n2) for the whole run."""
    why = slurmd.missing()
    if why is not None:
        pytest.skip(f"no Slurm test cluster: {why}")
    machine.hold("slurm")
    cluster = slurmd.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.close()


@pytest.fixture(autouse=True, scope="module")
def _machine_group(request: pytest.FixtureRequest) -> None:
    """A module whose tests share the machine's daemons claims them (tests/machine.py)."""
    group = machine.SHARED_BY_MACHINE.get(request.path.name)
    if group is not None:
        machine.hold(group)


@pytest.fixture
def slurm(
    request: pytest.FixtureRequest, slurm_daemons: slurmd.SlurmCluster
) -> slurmd.SlurmCluster:
    """The Slurm test cluster with no job in it and every node idle."""
    if machine.SHARED_BY_MACHINE.get(request.path.name) != "slurm":
        pytest.fail(
            f"{request.path.name} uses the Slurm test cluster: add it to tests/machine.py's "
            "SHARED_BY_MACHINE as 'slurm', or under -n it runs beside the Slurm tests"
        )
    slurm_daemons.reset()
    return slurm_daemons


def launch_processes() -> list[psutil.Process]:
    """Processes of any dtrun launch over SSH (they carry DTRUN_LAUNCH) still running here.
    Under pytest-xdist, only this worker's, and never another test session's (other checkouts'
    tests on this machine have workers named gw0 too): every process of a session carries its
    DTRUN_TEST_SESSION (the tests' sshd sets it in its sessions, tests/sshd.py; an embedded node
    keeps DTRUN_* variables, runner/plan/machineenv.py); with --worker-netns, those in the
    worker's own network namespace, which everything it starts inherits; without, those whose
    PYTEST_XDIST_WORKER is this worker's (a Slurm or Spark launch inherits it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            env = proc.environ()
            session = env.get("DTRUN_TEST_SESSION") == os.environ.get("DTRUN_TEST_SESSION")
            if _OWN_NETWORK:  # what this worker started, and only that, lives in its netns
                mine = session and _my_network(proc)
            else:
                mine = session and (worker is None or env.get("PYTEST_XDIST_WORKER") == worker)
            if "DTRUN_LAUNCH" in env and mine and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def _my_network(proc: psutil.Process) -> bool:
    """Whether ``proc`` lives in this worker's own network namespace (--worker-netns)."""
    return Path(f"/proc/{proc.pid}/ns/net").readlink() == Path("/proc/self/ns/net").readlink()


def launched_running(text: str) -> list[str]:
    """Pids of launch processes whose command line holds `text`; one that ends while being
    looked at is left out (psutil raises NoSuchProcess for it)."""
    found = []
    for proc in launch_processes():
        with contextlib.suppress(psutil.Error):
            if text in " ".join(proc.cmdline()):
                found.append(str(proc.pid))
    return found


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[Path]:
    """A working directory that must hold no running process when the test ends."""
    yield tmp_path
    left = processes_under(tmp_path) + launch_processes()
    # one found in its last moment is not left behind: CI once named one that was a zombie by
    # the time the failure was written
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [proc for proc in left if not ended(proc.pid)]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not left, f"processes left behind: {[_described(p) for p in left]}"


def _described(proc: psutil.Process) -> str:
    """A leftover process as the failure shows it (psutil.Process has .info only when it came
    from process_iter with attributes)."""
    with contextlib.suppress(psutil.Error):
        return f"{proc.pid} {' '.join(proc.cmdline())[:200]}"
    return str(proc.pid)


@pytest.fixture(autouse=True)
def _unit_extensions(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test's bench looks for stale torch extension locks in an empty directory, never
    in the one an interrupted e2e run may have left one in."""
    if request.node.get_closest_marker("unit") is not None:
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/nonexistent/dtrun-unit-torch-extensions")


@pytest.fixture
def deepspeed_op() -> None:
    """DeepSpeed's shared-memory op built in the suite's extension directory, and no stale
    build lock there for a user's DeepSpeed program to wait on forever (tests/torch_extensions)."""
    removed = torch_extensions.ready()
    if removed:
        print(f"removed stale torch extension locks: {[str(p) for p in removed]}")


@pytest.fixture
def aws_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS setting of this machine reaches the test: no AWS_* variables, empty shared
    files, no instance metadata service; one region."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    empty = tmp_path / "aws-empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def s3(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Client]:
    """moto's in-process S3 holding the bucket tests.aws.BUCKET; credentials in the environment."""
    import boto3
    from moto import mock_aws

    from tests.aws import BUCKET

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def no_aws_credentials(aws_env: None) -> Iterator[None]:
    """moto's S3 (so nothing leaves the machine) and no credentials anywhere boto3 looks."""
    from moto import mock_aws

    with mock_aws(config={"core": {"mock_credentials": False}}):
        yield


# A small file system of its own, to fill for real (needs root, as CI and ./dev test have).


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """mount(size_k): a new tmpfs of that size under tmp_path; unmounted after the test."""
    mounted: list[Path] = []

    def mount(size_k: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_k}k", "tmpfs", str(where)],
            capture_output=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(where)
        return where

    yield mount
    from dtrun.record.writer import release_writer

    release_writer()  # a sweep run in this process holds its run directory's lock file open
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


def fill(disk: Path) -> None:
    """Take every free byte of ``disk``."""
    with (disk / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.fixture(autouse=True)
def no_remembered_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no secret remembered: one command per process in dtrun, many
    tests per process here (a value one test planted would be scrubbed from another's files)."""
    from dtrun import redact

    monkeypatch.setattr(redact, "_process", redact.Redactor())
