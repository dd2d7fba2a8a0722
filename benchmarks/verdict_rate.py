"""How often a default `dtrun bench` reaches a verdict, and how wide its intervals are: issue
#13's measure; with --compare, five fixed launches against the default (issue #29).

Runs `dtrun bench` ROUNDS times on the embedded cluster with the defaults (plus any ARGS after
--), one after another, and reads each run's summary.json and runs.json: every point's verdict
(scales, loses, inconclusive), its efficiency and interval, its launches and why it stopped,
and the run's wall time and node-seconds (each launch's wall time x its nodes, the points'
launches; the health gate's are the same for both and not counted). Prints one line per run
and the totals: verdicts reached out of ROUNDS per point, the median interval width, the
launch-to-launch spread, the launches an undecided point's reason says would decide it, wall time
a run, and node-seconds per conclusive verdict (a run's node-seconds summed over the runs,
over the conclusive verdicts among them).

With --compare, each round runs `--repeat 5` (the fixed default before issue #29) and the
default (launching until decided, since) one after the other (the order alternating by round,
so that a drift of the machine falls on both alike), each run in a directory of its own, and
prints the totals for each. With --checkout DIR, each round runs the default from this checkout
and from DIR (another checkout's dtrun, for old against new in one sitting), the same way.

With --replay-max K (repeatable), each until-decided run's launches are also replayed as a sweep
of at most K launches would have looked at them (runner/report/sequential.py replay: the same
rounds, each point's first launches), and the totals say how many such intervals decided: an
old and a new maximum compared on the same launches. The noise check's set-aside is not
replayed. With --from DIR, the runs a --keep DIR holds are read again instead of launched.

    .venv/bin/python benchmarks/verdict_rate.py [--rounds 10] [--compare | --checkout DIR]
        [--keep DIR | --from DIR] [--replay-max K ...] [-- ARGS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADVISED = re.compile(r"to decide: (?:about (\d+)|more than (\d+)) launches a point")
FIXED = ("--repeat", "5")  # the default of a sweep of 2+ node counts was this until issue #29


@dataclass
class Tally:
    """One way of running the sweep, over its runs."""

    name: str
    extra: tuple[str, ...]
    checkout: str | None = None  # another checkout's dtrun (PYTHONPATH); None: this one
    verdicts: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    widths: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    launches: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    walls: list[float] = field(default_factory=list)
    node_s: list[float] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)  # each run's launch-to-launch sd
    # an undecided point's launches that would decide it, as its reason says ("12", ">100")
    advised: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    decided: int = 0
    failed: int = 0
    # --replay-max K: per K, each run's point's interval as a sweep of at most K launches left
    # it ("decided" or not), over the runs
    replayed: dict[int, list[bool]] = field(default_factory=lambda: defaultdict(list))


def replay_at(tally: Tally, run: Path, most: list[int]) -> None:
    """The run's launches looked at as a sweep of at most K launches would have, for each K."""
    from dtrun.report.resultfile import load_train_result
    from dtrun.report.sequential import replay
    from dtrun.spec.launchplan import RESULT_FILE

    runs = json.loads((run / "runs.json").read_text())["runs"]
    results: dict[int, list[Any]] = defaultdict(list)
    for launch in sorted(runs, key=lambda r: (r["nodes"], r["repeat"])):
        if launch["status"] == "ok":
            results[launch["nodes"]].append(
                load_train_result(run / launch["run_dir"] / RESULT_FILE)
            )
    for k in most:  # a sweep of at most k takes each count's first k, disturbed ones included
        stops, _ = replay({n: rs[:k] for n, rs in results.items()}, k)
        points = sorted(results)[1:]
        tally.replayed[k].append(all(
            n in stops and stops[n].why == "decided" for n in points
        ))  # fmt: skip


def run_once(
    tally: Tally, index: int, tmp: str, port: int, args: list[str], again: bool = False
) -> Path | None:
    """One run of ``tally``'s sweep (``again``: read the kept one instead); its directory, or
    None where it failed."""
    run_id = f"{tally.name}-{index}"  # one directory per way and round
    if again:  # a kept run: its wall time is not recorded
        return read_run(tally, Path(tmp) / run_id, index, math.nan)
    command = [
        sys.executable, "-m", "dtrun.cli", "bench", "--quiet", "--output", tmp,
        "--run-id", run_id, "--port", str(port), *tally.extra, *args,
    ]  # fmt: skip
    env = dict(os.environ)
    if tally.checkout is not None:  # its dtrun, and its code on the nodes (the launch scripts)
        env["PYTHONPATH"] = tally.checkout
    started = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env=env, cwd=tmp
    )  # cwd: not a checkout, whose dtrun would come first on the path
    wall = time.monotonic() - started
    if done.returncode != 0:
        tally.walls.append(wall)
        tally.failed += 1
        print(f"{tally.name} run {index}: exit {done.returncode}: {done.stderr[-800:]}")
        return None
    return read_run(tally, Path(tmp) / run_id, index, wall)


def read_run(tally: Tally, run: Path, index: int, wall: float) -> Path:
    """A finished run's verdicts, intervals and launches, tallied and printed."""
    tally.walls.append(wall)
    summary = json.loads((run / "summary.json").read_text())
    runs = json.loads((run / "runs.json").read_text())["runs"]
    node_s = sum(r["nodes"] * r["wall_s"] for r in runs)
    tally.node_s.append(node_s)
    said = []
    for row in summary["rows"]:
        if row.get("verdict") in (None, "baseline"):
            continue
        low, high = row["efficiency_low"], row["efficiency_high"]
        tally.verdicts[row["nodes"]].append(row["verdict"])
        tally.launches[row["nodes"]].append(row["launches_n"])
        tally.decided += row["verdict"] in ("scales", "loses")
        if low is not None and high is not None:
            tally.widths[row["nodes"]].append(high - low)
        interval = "-" if low is None else f"[{low * 100:.1f}, {high * 100:.1f}]"
        stopped = f", {row['launches_n']} launches, {row['stopped']}" if row.get("stopped") else ""
        left = [p["left_out"] for p in summary["noise"]["points"] if p["nodes"] == row["nodes"]]
        if left and left[0]:  # launches in steal or other load, left out of the interval
            stopped += f" ({len(left[0])} more left out for noise)"
        sigma = row.get("launch_sigma")
        if sigma is not None:
            tally.sigmas.append(sigma)
        advised = ADVISED.search(row.get("verdict_reason") or "")
        if advised:  # an undecided point's advice (runner/report/stats.py, Advice)
            tally.advised[row["nodes"]].append(advised.group(1) or f">{advised.group(2)}")
        said.append(
            f"{row['nodes']} nodes: {row['verdict']} {row['efficiency'] * 100:.1f}% "
            f"{interval}{stopped}"
            + ("" if sigma is None else f", launches' sd {sigma * 100:.1f}%")
            + (f", would decide at about {tally.advised[row['nodes']][-1]}" if advised else "")
        )
    took = "read again" if math.isnan(wall) else f"{wall:.0f} s"
    print(
        f"{tally.name} run {index}: {'; '.join(said)} ({took}, "
        f"{node_s:.0f} node-s; load {Path('/proc/loadavg').read_text().split()[0]})",
        flush=True,
    )
    return run


def totals(tally: Tally) -> None:
    print(f"== {tally.name}")
    for nodes in sorted(tally.verdicts):
        said = tally.verdicts[nodes]
        reached = sum(verdict != "inconclusive" for verdict in said)
        counts = {v: said.count(v) for v in sorted(set(said))}
        widths = tally.widths[nodes]
        width = (
            f"median {statistics.median(widths) * 100:.1f} points (min {min(widths) * 100:.1f}, "
            f"max {max(widths) * 100:.1f})"
            if widths
            else "-"
        )
        taken = tally.launches[nodes]
        advised = tally.advised[nodes]
        print(
            f"{nodes} nodes: a verdict in {reached} of {len(said)} runs {counts}; interval "
            f"width {width}; launches median {statistics.median(taken):g} "
            f"({min(taken)}-{max(taken)})"
            + (f"; undecided, would decide at about {', '.join(advised)}" if advised else "")
        )
    if tally.sigmas:
        sigmas = tally.sigmas
        print(
            f"launch-to-launch sd of log tokens/s: median {statistics.median(sigmas) * 100:.1f}% "
            f"({min(sigmas) * 100:.1f}-{max(sigmas) * 100:.1f}%)"
        )
    for k, decided in sorted(tally.replayed.items()):
        print(
            f"replayed at most {k} launches: every interval decided in {sum(decided)} of "
            f"{len(decided)} runs (the noise set-aside not replayed)"
        )
    walls = [wall for wall in tally.walls if not math.isnan(wall)]
    if walls:  # none for runs read again (--from)
        print(
            f"wall time per run: median {statistics.median(walls):.0f} s ({min(walls):.0f}-"
            f"{max(walls):.0f}); failed runs {tally.failed}"
        )
    if tally.node_s:
        spent = sum(tally.node_s)
        per = f"{spent / tally.decided:.0f}" if tally.decided else "- (none conclusive)"
        print(
            f"node-seconds per run: median {statistics.median(tally.node_s):.0f} "
            f"({min(tally.node_s):.0f}-{max(tally.node_s):.0f}); per conclusive verdict: {per} "
            f"({spent:.0f} node-s over {tally.decided} verdicts)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--port", type=int, default=29960)
    parser.add_argument(
        "--compare", action="store_true", help="each round: --repeat 5 and the default"
    )
    parser.add_argument("--checkout", help="each round: the default here and from this checkout")
    parser.add_argument(
        "--keep", type=Path, help="write the run directories here, kept (default: a temporary one)"
    )
    parser.add_argument(
        "--from", dest="again", type=Path, help="read the runs a --keep DIR holds, launch none"
    )
    parser.add_argument(
        "--replay-max", type=int, action="append", default=[], metavar="K",
        help="also replay each run's launches as a sweep of at most K launches (repeatable)",
    )  # fmt: skip
    parser.add_argument("args", nargs="*", help="more `dtrun bench` arguments")
    args = parser.parse_args()
    if args.again and args.keep:
        parser.error("--from reads a kept sitting, and --keep writes one: pass one of them")
    ways = [Tally("defaults", ())]
    if args.compare:
        ways = [Tally("fixed", FIXED), Tally("defaults", ())]
    elif args.checkout:
        ways = [Tally("checkout", (), str(Path(args.checkout).resolve())), Tally("defaults", ())]
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; "
        f"dtrun bench {' '.join(args.args) or '(defaults)'}"
        f"{', --repeat 5 against the default' if args.compare else ''}"
        f"{f', against {args.checkout}' if args.checkout else ''}, {args.rounds} rounds; "
        f"started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        flush=True,
    )
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    where = args.keep or args.again
    kept = contextlib.nullcontext(str(where.resolve())) if where else None
    with kept or tempfile.TemporaryDirectory(prefix="dtrun-verdict-") as tmp:
        for index in range(args.rounds):
            order = ways if index % 2 == 0 else ways[::-1]
            for which, tally in enumerate(order):
                port = args.port + 4 * index + 2 * which
                run = run_once(tally, index, tmp, port, args.args, again=args.again is not None)
                if run is not None and args.replay_max:
                    replay_at(tally, run, args.replay_max)
    for tally in ways:
        totals(tally)
    print(f"load average at the end: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
