"""One 2-node point through `dtrun bench --slurm`, against the same training started by a
hand-written sbatch script with `srun torchrun` (issue 14: ratio target <= 1.10).

Baseline (B): an sbatch script as a Slurm user writes it: two nodes, `srun` starting one
`torchrun` per node with a c10d rendezvous on the first node, the same training workload with the
same arguments and thread settings; timed from submitting it to the job leaving squeue (asked
every 50 ms). Candidate (A):
`dtrun bench --slurm --nodes 2` with the same workload: it asks for the allocation (sbatch),
waits for it, renders the scripts, starts them with one srun step, collects, writes the report,
and cancels the allocation, timed from start to exit. dtrun runs with --no-busbw and
--no-health-gate (extra measurement the script does not do, not overhead). Also timed: from
starting dtrun to its first node's script starting (the wrapper's first line, streamed).

Slurm's own queue time: in both arms a thread asks squeue every 50 ms from the start, and the
first answer that shows a job RUNNING ends the job's wait in the queue. slurmctld starts a job
on a free cluster within 0.07 s or after 1-3 s (its scheduler's pass; job state PENDING,
reason None, in both arms alike). The ratio is given as timed, and past the queue:
(A - A's queue) / (B - B's queue), which leaves out what Slurm's scheduler does and neither
arm can change.

The cluster is the test suite's real one (tests/slurmd.py: slurmctld and two slurmd on this
machine, one CPU each), started for the run; A and B alternate after one warm-up of each.

    .venv/bin/python benchmarks/slurm_vs_sbatch.py [--rounds 5] [--dtrun PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
BIN = Path(sys.executable).parent

from overhead_vs_bare_torchrun import workload_args  # noqa: E402  (beside this file)

from tests import slurmd  # noqa: E402

FIRST_LINE = "dtrun: slurm task"


def sbatch_script(steps: int, warmup: int, port: int, run: str, workdir: Path) -> str:
    """What a Slurm user writes by hand for the same point."""
    first, second = (address for address, _ in slurmd.NODES.values())
    train = " ".join(workload_args(steps, warmup, workdir / "result.json"))
    return f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output={workdir}/slurm-%j.out
export PYTHONPATH={REPO} OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 GLOO_SOCKET_IFNAME=lo
srun --kill-on-bad-exit=1 bash -c 'addresses=({first} {second})
exec {BIN}/torchrun --nnodes=2 --nproc-per-node=1 \\
  --rdzv-backend=c10d --rdzv-endpoint={first}:{port} --rdzv-id={run} \\
  --rdzv-conf=is_host=$((SLURM_NODEID == 0)) --local-addr=${{addresses[$SLURM_NODEID]}} \\
  --max-restarts=0 {train}'
"""


class QueueWatch:
    """Asks squeue every 50 ms from its start: when a job was first seen RUNNING."""

    def __init__(self, cluster: slurmd.SlurmCluster) -> None:
        self.cluster = cluster
        self.running_at: float | None = None
        self.start = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set() and self.running_at is None:
            states = self.cluster.run("squeue", "-h", "-o", "%T").stdout.split()
            if "RUNNING" in states:
                self.running_at = time.perf_counter() - self.start
            time.sleep(0.05)

    def stop(self) -> float:
        """Seconds from the start to the job running (0 if it was never seen running)."""
        self._stop.set()
        self._thread.join()
        return self.running_at or 0.0


def by_hand(cluster: slurmd.SlurmCluster, steps: int, warmup: int, port: int, run: str,
            workdir: Path) -> tuple[float, float]:  # fmt: skip
    """(wall time from submitting to the job leaving squeue, its time in the queue)."""
    script = workdir / "job.sh"
    script.write_text(sbatch_script(steps, warmup, port, run, workdir))
    start = time.perf_counter()
    watch = QueueWatch(cluster)
    done = subprocess.run(["sbatch", "--parsable", str(script)], env=cluster.env, cwd=workdir,
                          capture_output=True, text=True, check=False)  # fmt: skip
    # `sbatch --wait` looks at the job every few seconds (it returned at 10.0 s every time):
    # the job's end is taken from squeue, asked every 50 ms, instead
    job = done.stdout.strip()
    while done.returncode == 0 and cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout:
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    queued = watch.stop()
    if done.returncode != 0 or not (workdir / "result.json").is_file():
        logs = "".join(p.read_text()[-2000:] for p in workdir.glob("slurm-*.out"))
        raise SystemExit(f"sbatch failed ({done.returncode}): {done.stderr}\n{logs}")
    return elapsed, queued


def dtrun(cluster: slurmd.SlurmCluster, steps: int, warmup: int, port: int, run: str,
          workdir: Path, exe: str) -> tuple[float, float, float]:  # fmt: skip
    """(wall time of the whole command, time until its first node's script started, its
    allocation's time in the queue)."""
    command = [
        exe, "bench", "--slurm", "--nodes", "2", "--steps", str(steps),
        "--warmup", str(warmup), "--repeat", "1", "--port", str(port), "--output", str(workdir),
        "--run-id", run, "--no-busbw", "--no-health-gate",
    ]  # fmt: skip
    first = None
    start = time.perf_counter()
    watch = QueueWatch(cluster)
    with subprocess.Popen(command, env=cluster.env, cwd=workdir, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as process:  # fmt: skip
        assert process.stdout is not None
        said = []
        for line in process.stdout:
            said.append(line)
            if first is None and FIRST_LINE in line:
                first = time.perf_counter() - start
        code = process.wait()
    elapsed = time.perf_counter() - start
    queued = watch.stop()
    if code != 0 or first is None or not (workdir / run / "report.md").is_file():
        raise SystemExit(f"dtrun failed ({code}): {''.join(said)[-3000:]}")
    return elapsed, first, queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="counted A/B pairs")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29800)
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="the dtrun executable to time")
    args = parser.parse_args()
    # `timeout` and Ctrl-C stop the run through the finally below, which stops the cluster
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    why = slurmd.missing()
    if why is not None:
        raise SystemExit(f"cannot start the Slurm test cluster: {why}")
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"one point: 2 Slurm nodes x 1 process, {args.steps} steps ({args.warmup} warm-up)")
    print(f"dtrun: {args.dtrun}")
    pairs: list[tuple[float, float]] = []
    past_queue: list[float] = []  # (A - A's queue) / (B - B's queue)
    firsts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-slurm-bench-") as tmp:
        cluster = slurmd.start(Path(tmp) / "slurm")
        try:
            for i in range(args.rounds + 1):
                a_dir, b_dir = Path(tmp) / f"a{i}", Path(tmp) / f"b{i}"
                a_dir.mkdir()
                b_dir.mkdir()
                cluster.reset()
                a, first, qa = dtrun(
                    cluster, args.steps, args.warmup, args.port, f"a{i}", a_dir, args.dtrun
                )
                cluster.reset()
                b, qb = by_hand(cluster, args.steps, args.warmup, args.port + 10, f"b{i}", b_dir)
                label = "warm-up" if i == 0 else f"round {i}"
                print(
                    f"{label:>8}: dtrun --slurm {a:6.2f} s (queued {qa:4.2f} s, first node "
                    f"started at {first:5.2f} s)   sbatch+srun torchrun {b:6.2f} s (queued "
                    f"{qb:4.2f} s)   ratio {a / b:.3f}, past the queue {(a - qa) / (b - qb):.3f}"
                )
                if i:
                    pairs.append((a, b))
                    past_queue.append((a - qa) / (b - qb))
                    firsts.append(first)
        finally:
            cluster.close()
    ratios = [a / b for a, b in pairs]
    print(
        f"median: dtrun --slurm {statistics.median(a for a, _ in pairs):.2f} s, "
        f"sbatch {statistics.median(b for _, b in pairs):.2f} s, "
        f"ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
        "target <= 1.10 (issue 14)"
    )
    print(
        f"past Slurm's queue: ratio {statistics.median(past_queue):.3f} "
        f"(min {min(past_queue):.3f}, max {max(past_queue):.3f})"
    )
    print(
        f"dtrun --slurm to the first node's script: median {statistics.median(firsts):.2f} s "
        f"(min {min(firsts):.2f}, max {max(firsts):.2f})"
    )


if __name__ == "__main__":
    main()
