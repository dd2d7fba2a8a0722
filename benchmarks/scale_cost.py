"""dtrun's own cost as the cluster grows: wall time, CPU time and peak memory against N.

Starts N real OpenSSH sshd instances (tests/sshd.py: one per node, on 127.0.0.2, ...,
127.0.0.254, 127.0.1.1, ...; port 2222), inside a network namespace of its own (it re-runs
itself under `unshare -n`; root), and times on each N:

- exec:   `dtrun exec --hosts H -- true`;
- launch: `dtrun run --hosts H --nodes N --launcher tensorflow -- true`, a launch of a trivial
  program (the tensorflow launcher starts no launcher process of its own: what is timed is
  dtrun's, plus `true`; torchrun would start torch twice per node, 450 MB, 3 CPU-s). The first
  round on a new cluster sends dtrun's code to every node (shown as launch-1st); the later
  rounds find it there, as a user's second run does (their median is shown as launch);
- lines:  the launch of `seq 1 K` (--lines K, default 100), every node printing K lines: what
  dtrun spends on a program's output, beyond the launch of `true` (its CPU less launch's, over
  N x K lines, is shown as us/line), piped to a file as a cluster's output usually is;
- check:  `dtrun check --hosts H` for N up to --check-nodes (two torch processes per node,
  125 MB private memory each: 64 nodes would need 16 GB, more than this shared machine has);

then, with --judge, what `dtrun check` does with a result once it is back (read it, judge it)
on a real check result grown to each N (benchmarks/scale_records.py, grow_check), and
`dtrun report` and `dtrun compare` on run directories of sweeps up to each of --records node
counts, grown from a real 2-node sweep's records (scale_records.py, grow: every per-node entry
copied from real node i mod 2 and renamed, step times stretched by 1 + 0.04 log2 N, 0.06 for
the run compared with).

dtrun's CPU time is the user+sys time of the dtrun process and its descendants it waited for
(os.wait4): not the sshd instances' (children of this script) nor the programs' (the sshd
sessions'). Peak memory is the largest resident set of dtrun or one of those descendants.
The sshd instances set SHLVL=1 (sshd_config SetEnv), so a login skips root's ~/.bashrc
(`pyenv init`, 0.27 s a login here), a cost of the account, not of dtrun. Each sshd takes
a single connection from dtrun, so sshd's MaxStartups (200 here) is never reached. Fits are
least squares, a + b N; the marginal CPU a node between successive N shows whether it grows.

    .venv/bin/python benchmarks/scale_cost.py [--nodes 16,64] [--rounds 3] [--check-nodes 16]
        [--lines 100]
        [--records 64,256,1024] [--judge 64,256,1024] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.sshd

from scale_records import grow, grow_check  # beside this file: the run directory it times

from tests.sshd import available, start_cluster

BIN = Path(sys.executable).parent
INSIDE = "DTRUN_SCALE_NETNS"  # set once the script runs in its own network namespace
REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "data" / "sweeps" / "repeat2-noisy"  # a real sweep's records


@dataclasses.dataclass(frozen=True)
class Cost:
    what: str
    nodes: int
    wall_s: float
    cpu_s: float  # user + sys of dtrun and the descendants it waited for
    sys_s: float  # of which in the kernel (on loopback: the TCP path to the sshd instances too)
    rss_mb: float  # the largest resident set among them
    load: str  # /proc/loadavg's 1, 5 and 15-minute averages when it started


def timed(what: str, nodes: int, argv: list[str], log: Path, ok: tuple[int, ...] = (0,)) -> Cost:
    """Run dtrun once; its wall time and, from wait4, its own CPU time and peak memory."""
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    with log.open("wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in ok:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{' '.join(argv)} exited {process.returncode}:\n{tail}")
    cpu = usage.ru_utime + usage.ru_stime
    return Cost(what, nodes, wall, cpu, usage.ru_stime, usage.ru_maxrss / 1024, load)


def median_cost(costs: list[Cost]) -> Cost:
    """Median wall and CPU over the rounds, the largest peak memory, the first load."""
    return dataclasses.replace(
        costs[0],
        wall_s=statistics.median(c.wall_s for c in costs),
        cpu_s=statistics.median(c.cpu_s for c in costs),
        sys_s=statistics.median(c.sys_s for c in costs),
        rss_mb=max(c.rss_mb for c in costs),
    )


def on_cluster(nodes: int, args: argparse.Namespace, tmp: Path) -> list[Cost]:
    # One SetEnv line: sshd takes the first, so the tests' own names (tests/sshd.py) go in it.
    names = " ".join(f"{k}={os.environ[k]}" for k in ("PYTEST_XDIST_WORKER",) if k in os.environ)
    started = time.perf_counter()
    cluster = start_cluster(
        tmp / f"sshd-{nodes}", nodes, settings=_every(nodes, f"SetEnv SHLVL=1 {names}\n")
    )
    print(f"{nodes} sshd instances up in {time.perf_counter() - started:.1f} s", flush=True)
    try:
        hosts = tmp / f"hosts-{nodes}.yaml"
        hosts.write_text(
            f"user: {cluster.user}\nport: 2222\nkey: {cluster.key}\ncpus: 1\n"
            f"known_hosts: {cluster.known_hosts}\nworkdir: {tmp / f'remote-{nodes}'}\n"
            "interface: lo\n"
            f"python: {BIN}\n"
            f"hosts: [{', '.join(host.address for host in cluster.hosts)}]\n"
        )
        dtrun, runs = str(args.dtrun), str(tmp / "runs")
        costs = []
        commands = {
            "exec": [dtrun, "exec", "--hosts", str(hosts), "--", "true"],
            "launch": [
                dtrun, "run", "--hosts", str(hosts), "--nodes", str(nodes),
                "--launcher", "tensorflow", "--output", runs, "--", "true",
            ],
        }  # fmt: skip
        if args.lines:
            commands["lines"] = [*commands["launch"][:-1], "seq", "1", str(args.lines)]
        for what, argv in commands.items():
            rounds = [
                timed(what, nodes, argv, tmp / f"{what}-{nodes}-{k}.log")
                for k in range(args.rounds)
            ]
            if what == "launch" and len(rounds) > 1:  # the first sends dtrun's code
                costs.append(dataclasses.replace(rounds[0], what="launch-1st"))
                show(costs[-1])
                rounds = rounds[1:]
            costs.append(median_cost(rounds))
            show(costs[-1])
            if what == "lines":
                launch = next(c for c in costs if c.what == "launch" and c.nodes == nodes)
                extra = costs[-1].cpu_s - launch.cpu_s
                print(f"   lines: {1e6 * extra / (nodes * args.lines):.0f} us of dtrun CPU a line")
        if nodes <= args.check_nodes:
            argv = [
                dtrun, "check", "--hosts", str(hosts), "--output", runs, "--timeout", "1800",
            ]  # fmt: skip
            # exit 5: a node or link was flagged; dtrun's work is the same
            costs.append(timed("check", nodes, argv, tmp / f"check-{nodes}.log", ok=(0, 5)))
            show(costs[-1])
            found = sorted(
                (tmp / "runs").glob("*/check/result.json"), key=lambda p: p.stat().st_mtime
            )
            args.check_result = args.check_result or found[-1]
    finally:
        cluster.close()
    return costs


def _every(nodes: int, line: str) -> dict[str, str]:
    from tests.sshd import address

    return {address(index + 2): line for index in range(nodes)}


def on_records(largest: int, real: Path, tmp: Path, dtrun: str) -> list[Cost]:
    a = grow(real, tmp / f"sweep-{largest}-a", largest, slope=0.04)
    b = grow(real, tmp / f"sweep-{largest}-b", largest, slope=0.06)
    costs = [
        timed("report", largest, [dtrun, "report", str(a)], tmp / f"report-{largest}.log", (0,)),
        timed("compare", largest, [dtrun, "compare", str(a), str(b)], tmp / f"cmp-{largest}.log"),
    ]
    for cost in costs:
        show(cost)
    return costs


# What `dtrun check` does with the nodes' result once it is back (runner/sweep/check.py): read
# it, judge it, and make the record it writes; timed on results grown to N nodes.
JUDGE = """
import json, pathlib, sys
from dtrun.check.expected import Thresholds, expected_for
from dtrun.check.judge import judge_check
from dtrun.check.result import load
measured = load(pathlib.Path(sys.argv[1]))
limits = Thresholds.for_device(measured.device)
json.dumps(judge_check(measured, {}, {}, limits, expected_for(None, 1)).to_json())
"""


def on_check_results(counts: list[int], real: Path, tmp: Path) -> list[Cost]:
    costs = []
    for nodes in counts:
        grown = tmp / f"check-{nodes}" / "result.json"
        grown.parent.mkdir()
        grown.write_text(json.dumps(grow_check(json.loads(real.read_text()), nodes)))
        argv = [sys.executable, "-c", JUDGE, str(grown)]
        costs.append(timed("judge", nodes, argv, tmp / f"judge-{nodes}.log"))
        show(costs[-1])
    return costs


def show(cost: Cost) -> None:
    print(
        f"{cost.what:>8} N={cost.nodes:<5} wall {cost.wall_s:7.2f} s  dtrun CPU "
        f"{cost.cpu_s:6.2f} s (sys {cost.sys_s:5.2f}; {1000 * cost.cpu_s / cost.nodes:6.2f} "
        "ms/node)  "
        f"peak RSS {cost.rss_mb:6.0f} MB  load {cost.load}",
        flush=True,
    )


@dataclasses.dataclass(frozen=True)
class Fit:
    """Least-squares fixed + per_node x N of one figure over the node counts."""

    fixed: float
    per_node: float

    def at(self, nodes: int) -> float:
        return self.fixed + self.per_node * nodes


def fit(costs: list[Cost], field: str) -> Fit:
    xs = [float(c.nodes) for c in costs]
    ys = [float(getattr(c, field)) for c in costs]
    if len(xs) < 2:
        return Fit(ys[0], 0.0)
    slope, intercept = statistics.linear_regression(xs, ys)
    return Fit(intercept, slope)


def summary(costs: list[Cost]) -> list[dict[str, object]]:
    """Per command: the fits of CPU, wall and peak memory, and the marginal CPU per node
    between successive node counts (growing: worse than linear)."""
    rows: list[dict[str, object]] = []
    for what in dict.fromkeys(c.what for c in costs):
        mine = sorted((c for c in costs if c.what == what), key=lambda c: c.nodes)
        cpu, wall, rss = (fit(mine, field) for field in ("cpu_s", "wall_s", "rss_mb"))
        marginal = [
            1000 * (b.cpu_s - a.cpu_s) / (b.nodes - a.nodes) for a, b in itertools.pairwise(mine)
        ]
        rows.append(
            {
                "what": what,
                "nodes": [c.nodes for c in mine],
                "fits": {"cpu_s": cpu, "wall_s": wall, "rss_mb": rss},
                "marginal_cpu_ms_per_node": marginal,
                "extrapolated": {
                    n: {"cpu_s": cpu.at(n), "wall_s": wall.at(n), "rss_mb": rss.at(n)}
                    for n in (1024, 4096)
                },
            }
        )
        print(
            f"{what:>8}: CPU {cpu.fixed:.2f} s + {1000 * cpu.per_node:.2f} ms/node (marginal "
            f"ms/node {', '.join(f'{m:.2f}' for m in marginal) or '-'}); wall {wall.fixed:.2f} s "
            f"+ {1000 * wall.per_node:.1f} ms/node; RSS {rss.fixed:.0f} MB + "
            f"{1000 * rss.per_node:.0f} KB/node; at 1,024 / 4,096 nodes: CPU {cpu.at(1024):.1f} / "
            f"{cpu.at(4096):.1f} s, wall {wall.at(1024):.1f} / {wall.at(4096):.1f} s, RSS "
            f"{rss.at(1024):.0f} / {rss.at(4096):.0f} MB"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    counts = lambda text: [int(n) for n in text.split(",") if n]  # noqa: E731
    parser.add_argument("--nodes", type=counts, default=[16, 64], help="sshd node counts")
    parser.add_argument("--rounds", type=int, default=3, help="exec and launch rounds per N")
    parser.add_argument("--check-nodes", type=int, default=16, help="dtrun check up to this N")
    parser.add_argument("--lines", type=int, default=100, help="lines a node prints (0: none)")
    parser.add_argument(
        "--records", type=counts, default=[64, 256, 1024], help="report/compare sweeps to N"
    )
    parser.add_argument(
        "--real-run", type=Path, default=REAL, help="the real 2-node sweep whose records are grown"
    )
    parser.add_argument(
        "--judge", type=counts, default=[], help="time check's judging of results grown to N"
    )
    parser.add_argument(
        "--check-result",
        type=Path,
        help="the real check result to grow (default: the last check's)",
    )
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="the dtrun executable")
    parser.add_argument("--json", type=Path, help="write every figure and fit here")
    args = parser.parse_args()
    if os.environ.get(INSIDE) != "1":
        if shutil.which("unshare") is None:
            raise SystemExit("needs unshare (util-linux) and root for a network namespace")
        script = 'ip link set lo up && exec "$0" "$@"'
        argv = ["unshare", "-n", "sh", "-c", script, sys.executable, *sys.argv]
        os.execvpe("unshare", argv, dict(os.environ, **{INSIDE: "1"}))
    if args.nodes and not available():
        raise SystemExit("needs OpenSSH's server: apt-get install openssh-server")
    print(f"{os.cpu_count()} cores; load {Path('/proc/loadavg').read_text().strip()}")
    costs: list[Cost] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-scale-") as name:
        tmp = Path(name)
        version = timed("startup", 1, [args.dtrun, "--version"], tmp / "version.log")
        show(version)
        for nodes in args.nodes:
            costs += on_cluster(nodes, args, tmp)
        if args.judge and args.check_result is None:
            raise SystemExit("--judge needs a check result: --check-nodes N or --check-result")
        if args.judge:
            costs += on_check_results(args.judge, args.check_result, tmp)
        for largest in args.records:
            costs += on_records(largest, args.real_run, tmp, args.dtrun)
    rows = summary(costs)
    if args.json:
        data = {
            "startup": dataclasses.asdict(version),
            "costs": [dataclasses.asdict(c) for c in costs],
            "summary": rows,
        }
        args.json.write_text(json.dumps(data, indent=2, default=dataclasses.asdict) + "\n")


if __name__ == "__main__":
    main()
