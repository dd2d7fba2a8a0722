"""dtrun over SSH where the account's login shell is not bash: sh (dash), zsh, tcsh, fish and
ksh, each with the start-up file it reads for a command (tests/sshd.py, own_login). sshd hands
every command dtrun sends to that shell; what the user's command says must reach bash as
written, and its output and exit code come back exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import sshd
from tests.conftest import require_tool, run_dtrun
from tests.e2e.test_ssh import hosts_file_text
from tests.sshd import SshCluster

pytestmark = pytest.mark.e2e

PORT = 2250
# shell -> (its start-up file that runs for `shell -c`, under the home, and what it holds): a
# site's usual one, putting the user's own tools first
RC_FILES = {
    "zsh": (".zshenv", 'export PATH="$HOME/bin:$PATH"\nsetopt NO_NOMATCH\n'),
    "tcsh": (
        ".tcshrc",
        'setenv PATH "${HOME}/bin:${PATH}"\nalias rm "rm -i"\n'
        'if ( $?prompt ) then\n  echo "Welcome to the cluster"\nendif\n',
    ),
    "fish": (
        ".config/fish/config.fish",
        "set -gx PATH $HOME/bin $PATH\nif status is-interactive\n  echo Welcome\nend\n",
    ),
}
SHELLS = ["dash", "zsh", "tcsh", "fish", "ksh"]
# what each word must be on the node: spaces, $, !, quotes, a backslash, a glob
WORDS = ["a  b", "$HOME", "it's", '"q"', "!x", "back\\slash", "*", "{a,b}", "~"]


@pytest.fixture(scope="module", params=SHELLS)
def shell_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> SshCluster:
    name = request.param
    path = require_tool(name)  # ./dev test installs every one: missing fails, never skips
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    first = 70 + 2 * SHELLS.index(name)  # 127.0.0.70 ... 127.0.0.79
    cluster = sshd.start_cluster(
        tmp_path_factory.mktemp(f"shell-{name}"), 2, PORT, first=first, shell=path
    )
    assert cluster.home is not None
    if name in RC_FILES:
        rc, text = RC_FILES[name]
        (cluster.home / rc).parent.mkdir(parents=True, exist_ok=True)
        (cluster.home / rc).write_text(text)
    if name == "fish":  # its data directory, as any account has after its first login: both
        # nodes share this home, and two first fish runs at once race to make it (mkdir's
        # EEXIST), which fish reports as "Unable to locate data directory" (CI, 2026-12-06)
        (cluster.home / ".local" / "share" / "fish").mkdir(parents=True)
    request.addfinalizer(cluster.close)
    return cluster


def write_hosts(cluster: SshCluster, tmp: Path) -> Path:
    hosts = tmp / "hosts.yaml"
    hosts.write_text(hosts_file_text(cluster, tmp, count=2, port=PORT))
    return hosts


def node_lines(output: str, node: str) -> list[str]:
    prefix = f"[{node}] "
    return [line[len(prefix) :] for line in output.splitlines() if line.startswith(prefix)]


def exit_codes(output: str) -> dict[str, str]:
    """node -> exit code, from `dtrun exec`'s table (node, address, exit, error)."""
    rows = [[cell.strip() for cell in row.split("│")] for row in output.splitlines()]
    return {row[1]: row[3] for row in rows if len(row) > 3 and row[1].startswith("node-")}


def test_the_node_s_login_shell_is_the_one_the_account_has_and_reads_its_start_up_file(
    shell_cluster, no_leftovers
):
    """The test rig itself: sshd runs the command with that shell, which read its file."""
    hosts = write_hosts(shell_cluster, no_leftovers)
    done = run_dtrun(
        "exec", "--hosts", str(hosts), "--nodes", "0", "--",
        'echo "$SHELL"; echo "$PATH"; getent passwd "$(id -un)" | cut -d: -f7',
        cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    shell, path, passwd = node_lines(done.stdout, "node-0")
    assert Path(shell).name == Path(passwd).name and Path(shell).name in SHELLS
    assert path.startswith(f"{shell_cluster.home}/bin:") == (Path(shell).name in RC_FILES)


def test_exec_passes_every_word_and_line_to_bash_as_written_and_its_exit_codes(
    shell_cluster, no_leftovers
):
    hosts = write_hosts(shell_cluster, no_leftovers)
    here = no_leftovers / "globbed"
    here.mkdir()
    for file in ("x y", "z"):
        (here / file).touch()
    words = run_dtrun(
        "exec", "--hosts", str(hosts), "--", "printf", "[%s]\\n", *WORDS, cwd=no_leftovers
    )
    assert words.returncode == 0, words.stdout + words.stderr
    for node in ("node-0", "node-1"):
        assert node_lines(words.stdout, node) == [f"[{word}]" for word in WORDS]
    line = (
        f"cd {here} && printf '[%s]\\n' \"a  b\" '$HOME' 'it'\\''s' \"!x\" 'back\\slash' "
        '"$((6 * 7))" * && [ "$(hostname)" = nowhere ] || exit 7'
    )
    failed = run_dtrun("exec", "--hosts", str(hosts), "--", line, cwd=no_leftovers)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    expected = ["[a  b]", "[$HOME]", "[it's]", "[!x]", "[back\\slash]", "[42]", "[x y]", "[z]"]
    for node in ("node-0", "node-1"):
        assert node_lines(failed.stdout, node) == expected
    assert "2 of 2 nodes failed" in failed.stderr
    assert exit_codes(failed.stdout) == {"node-0": "7", "node-1": "7"}


def test_a_launch_stages_its_files_and_dtrun_s_code_and_runs_the_program_as_written(
    shell_cluster, no_leftovers
):
    """A real launch (the tensorflow launcher runs the program itself on each node): its files
    and dtrun's code go through `sh -s`, the launch line through the login shell."""
    hosts = write_hosts(shell_cluster, no_leftovers)
    out = no_leftovers / "runs"
    program = ["sh", "-c", 'printf "[%s]\\n" "$NODE_RANK" "$@"']
    done = run_dtrun(
        "run", "--hosts", str(hosts), "--launcher", "tensorflow", "--nodes", "2",
        "--port", "29980", "--timeout", "60", "--output", str(out), "--run-id", "shell",
        "--", *program, "sh", *WORDS, cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    launch = out / "shell" / "launch"
    for rank in (0, 1):
        log = (launch / f"node-{rank}.log").read_text()
        assert log.splitlines() == [f"[{rank}]", *(f"[{word}]" for word in WORDS)]
    record = json.loads((out / "shell" / "run.json").read_text())
    assert [node["exit_code"] for node in record["nodes"]] == [0, 0]
    code = no_leftovers / "remote" / "code" / "dtrun"
    assert (code / "__init__.py").is_file() and (code / "execute").is_dir()


# one write of the whole line: print's pieces, written one by one, were once split by
# DeepSpeed's own log line on the same stream (3 e2e workers)
ENVIRONMENT_SEEN = """
import os, sys
seen = [os.environ.get(key) for key in ("NODE_RANK", "SEEN", "OMP_NUM_THREADS")]
seen.append(str("code" in os.environ.get("PYTHONPATH", "")))
sys.stdout.write(" ".join(["seen", *map(str, seen)]) + "\\n")
sys.stdout.flush()
"""


@pytest.mark.parametrize("shell_cluster", ["tcsh"], indirect=True)
def test_deepspeed_s_pdsh_command_gives_every_rank_its_environment_under_csh(
    shell_cluster, no_leftovers
):
    """pdsh hands DeepSpeed's `export KEY=VALUE; ...` to the node's login shell, and csh has
    no `export`: without pdsh-ssh.sh the ranks ran without .deepspeed_env and PYTHONPATH."""
    hosts = write_hosts(shell_cluster, no_leftovers)
    (no_leftovers / "seen.py").write_text(ENVIRONMENT_SEEN)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--hosts", str(hosts), "--launcher", "deepspeed", "--nodes", "2",
        "--port", "29984", "--timeout", "120", "--env", "SEEN=x  y", "--output", str(out),
        "--run-id", "ds", "--", "python", str(no_leftovers / "seen.py"), cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    log = (out / "ds" / "launch" / "node-0.log").read_text()
    assert "Command not found" not in log
    seen = sorted(line.split(": ", 1)[1] for line in log.splitlines() if ": seen " in line)
    assert seen == ["seen 0 x  y 1 True", "seen 1 x  y 1 True"], log


def test_mpirun_starts_its_daemons_through_the_login_shell_and_every_rank_runs(
    shell_cluster, no_leftovers
):
    """OpenMPI writes the daemons' command for the shell it takes the account's for: fish it
    takes for sh, whose `( ... )` fish refuses, and mpirun waited for ever without fish-rsh.sh.
    --timeout 120, as the other launchers' here: ssh, a login shell and OpenMPI's daemons on
    each node start slowly beside the other e2e workers; a hang is for ever."""
    hosts = write_hosts(shell_cluster, no_leftovers)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--hosts", str(hosts), "--launcher", "mpirun", "--nodes", "2",
        "--port", "29988", "--timeout", "120", "--env", "SEEN=x  y", "--output", str(out),
        "--run-id", "mpi", "--", "sh", "-c", 'echo "seen $NODE_RANK [$SEEN]"', cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    log = (out / "mpi" / "launch" / "node-0.log").read_text()
    assert sorted(line for line in log.splitlines() if line.startswith("seen")) == [
        "seen 0 [x  y]", "seen 1 [x  y]",
    ], log  # fmt: skip


@pytest.mark.parametrize("shell_cluster", ["tcsh", "fish"], indirect=True)
def test_horovodrun_reaches_the_other_node_past_a_csh_or_fish_login_shell(
    shell_cluster, no_leftovers
):
    """horovod-ssh.sh sends Horovod's bash command to `bash -s` on its input: neither csh nor
    fish reads it."""
    hosts = write_hosts(shell_cluster, no_leftovers)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--hosts", str(hosts), "--launcher", "horovodrun", "--nodes", "2",
        "--port", "29992", "--timeout", "120", "--env", "SEEN=x  y", "--output", str(out),
        "--run-id", "hvd", "--", "sh", "-c", 'echo "seen $NODE_RANK [$SEEN]"', cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    log = (out / "hvd" / "launch" / "node-0.log").read_text()
    seen = sorted(line.split(":", 1)[1] for line in log.splitlines() if ":seen " in line)
    assert seen == ["seen 0 [x  y]", "seen 1 [x  y]"], log
