"""`dtrun exec` on 16 loopback nodes against `pdsh -R ssh` running the same command.

Starts 16 real OpenSSH sshd instances on 127.0.0.2 ... 127.0.0.17 (port 2222, their own host
keys, one client key; the tests' fixture), then runs `hostname` on all of them through each
tool, alternately (A B A B ...) after one warm-up of each, and prints each pair's ratio of wall
times and the median. Both check host keys against the same known_hosts file and use the same
key. Target from issue #5: median ratio <= 1.0. Every login runs the account's login shell,
which for a command over ssh reads ~/.bashrc: ``--no-login-rc`` has the sshd instances skip it
(issue 29: this machine's root ~/.bashrc runs `pyenv init`, 0.27 s a login, which both tools
pay once per node, 16 times on two cores).

    .venv/bin/python benchmarks/exec_vs_pdsh.py [--rounds 9] [--nodes 16] [--dtrun PATH]
        [--no-login-rc]
"""

from __future__ import annotations

import argparse
import getpass
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sshd import available, start_cluster

BIN = Path(sys.executable).parent


def timed(command: list[str], env: dict[str, str], expect: int) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    # One answer per node: dtrun prints "[node-i] HOSTNAME", pdsh "ADDRESS: HOSTNAME".
    answered = sum(1 for line in done.stdout.splitlines() if line.endswith(platform.node()))
    if done.returncode != 0 or answered != expect:
        raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="the dtrun executable to time")
    parser.add_argument(
        "--no-login-rc",
        action="store_true",
        help="the sshd instances set SHLVL=1 (sshd_config SetEnv), so the login shell, bash, "
        "skips ~/.bashrc: what a login costs without the account's own start-up files",
    )
    args = parser.parse_args()
    if not available() or shutil.which("pdsh") is None:
        raise SystemExit("needs sshd and pdsh: apt-get install openssh-server pdsh")
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{subprocess.run(['pdsh', '-V'], capture_output=True, text=True).stdout.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="dtrun-exec-bench-") as tmp:
        # bash reads ~/.bashrc for a command over ssh only as a top-level shell (SHLVL < 2)
        extra = "SetEnv SHLVL=1\n" if args.no_login_rc else ""
        settings = {f"127.0.0.{index + 2}": extra for index in range(args.nodes)}
        cluster = start_cluster(Path(tmp) / "sshd", args.nodes, settings=settings)
        try:
            addresses = [host.address for host in cluster.hosts]
            hosts = Path(tmp) / "hosts.yaml"
            hosts.write_text(
                f"user: {cluster.user}\nport: 2222\nkey: {cluster.key}\n"
                f"known_hosts: {cluster.known_hosts}\nhosts: [{', '.join(addresses)}]\n"
            )
            dtrun = [args.dtrun, "exec", "--hosts", str(hosts), "--", "hostname"]
            pdsh = [
                "pdsh", "-R", "ssh", "-l", getpass.getuser(), "-w", ",".join(addresses),
                "hostname",
            ]  # fmt: skip
            env = dict(
                os.environ,
                PDSH_SSH_ARGS_APPEND=(
                    f"-p 2222 -i {cluster.key} -o UserKnownHostsFile={cluster.known_hosts} "
                    "-o BatchMode=yes"
                ),
            )
            rc = "skipped (SetEnv SHLVL=1)" if args.no_login_rc else "run, as the account has it"
            print(f"{args.nodes} nodes; command: hostname; dtrun: {args.dtrun}; ~/.bashrc {rc}")
            pairs = []
            for index in range(args.rounds + 1):
                a = timed(dtrun, env, args.nodes)
                b = timed(pdsh, env, args.nodes)
                label = "warm-up" if index == 0 else f"round {index}"
                print(f"{label:>8}: dtrun exec {a:6.3f} s   pdsh {b:6.3f} s   ratio {a / b:.3f}")
                if index:
                    pairs.append((a, b))
        finally:
            cluster.close()
    ratios = [a / b for a, b in pairs]
    a_median = statistics.median(a for a, _ in pairs)
    b_median = statistics.median(b for _, b in pairs)
    print(
        f"median: dtrun exec {a_median:.3f} s, pdsh {b_median:.3f} s, "
        f"ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
        "target <= 0.8 (issue 41; issue 5: <= 1.0)"
    )


if __name__ == "__main__":
    main()
