"""One embedded 2-node point under `--launcher deepspeed` against the bare `deepspeed` launcher.

Three candidates run in turn, round after round, after one warm-up round:

- **dtrun deepspeed**: `dtrun bench --nodes 2 --launcher deepspeed --repeat 1` (the built-in
  training workload under ZeRO 2, `--no-health-gate`): plan, render, launch on the embedded
  cluster, collect, report.
- **bare deepspeed**: the same workload started by hand the way dtrun's embedded DeepSpeed path
  starts it (docs/launchers.md, "deepspeed"): one `deepspeed --hostfile=hostfile --no_ssh
  --node_rank=i` per node, both started together, with the hostfile, ds_config.json, program and
  arguments that dtrun rendered for the warm-up point (read back from its node scripts, so the
  two can never drift apart) and the variables its scripts export. Wall time until both exit.
- **dtrun torchrun**: the same point under `--launcher torchrun` (DDP), issue 29's first baseline.
- **bare, quick exit**: the bare commands through DeepSpeed's entry point with dtrun's quick exit
  (runner/plan/launchers/quickexit.py), as dtrun's nodes run it: dtrun deepspeed / this is
  dtrun's own cost, apart from the interpreter teardown the quick exit skips.

Each round's dtrun wall time is divided by that round's bare DeepSpeed and torchrun times; the
medians with min and max are printed. Issue 29's target: dtrun / bare deepspeed <= 1.05.

With `--cold`, one more dtrun point runs at the end with an empty TORCH_EXTENSIONS_DIR: on a
CPU machine DeepSpeed JIT-compiles its shared-memory op there unless the workload needs none.

    .venv/bin/python benchmarks/deepspeed_vs_bare.py [--rounds 7] [--steps 20] [--cold] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))
from dtrun.plan.launchers.deepspeed import QUICK_EXIT  # noqa: E402


def dtrun(
    launcher: str, args: argparse.Namespace, port: int, workdir: Path, env: dict[str, str]
) -> tuple[float, str]:
    """(wall seconds of `dtrun bench` for one 2-node point, its run id)."""
    run_id = f"{launcher}-{time.monotonic_ns()}"
    command = [
        str(BIN / "dtrun"), "bench", "--nodes", "2", "--launcher", launcher,
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--port", str(port),
        "--output", str(workdir), "--run-id", run_id, "--repeat", "1", "--quiet",
        "--no-health-gate",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{launcher} failed ({done.returncode}): {done.stderr.decode()[-3000:]}")
    return elapsed, run_id


def rendered(script: Path) -> tuple[dict[str, str], list[str]]:
    """The plain `export KEY=VALUE` lines and the `exec` command of one rendered node script."""
    text = script.read_text()
    exports: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export ") and "$" not in line:
            key, _, value = line.removeprefix("export ").partition("=")
            exports[key] = shlex.split(value)[0] if value else ""
    command = shlex.split(text[text.index("\nexec ") + 1 :].replace("\\\n", " "), comments=True)
    return exports, command[1:]


def bare_commands(plan: Path, port: int) -> list[tuple[dict[str, str], list[str]]]:
    """Each node's environment and `deepspeed` argv, as dtrun rendered them, on port `port`."""
    commands = []
    for rank in (0, 1):
        exports, argv = rendered(plan / f"node-{rank}.sh")
        argv = [f"--master_port={port}" if a.startswith("--master_port=") else a for a in argv]
        if argv[1:3] == ["-c", QUICK_EXIT]:  # dtrun's nodes: DeepSpeed's main, quick exit
            argv = [str(BIN / "deepspeed"), *argv[3:]]
        if not Path(argv[0]).name == "deepspeed" or "--no_ssh" not in argv:
            raise SystemExit(f"unexpected DeepSpeed command in {plan}: {shlex.join(argv)}")
        commands.append((exports, argv))
    return commands


def bare(
    commands: list[tuple[dict[str, str], list[str]]], plan: Path, workdir: Path, quick: bool = False
) -> float:
    """Both nodes' `deepspeed` commands started together; wall time until both exit.
    ``quick``: DeepSpeed's entry point with dtrun's quick exit instead of the deepspeed script."""
    if quick:
        commands = [
            (env, [str(BIN / "python"), "-c", QUICK_EXIT, *argv[1:]]) for env, argv in commands
        ]
    launch = Path(tempfile.mkdtemp(prefix="bare-", dir=workdir))
    for name in ("hostfile", "ds_config.json"):
        (launch / name).write_bytes((plan / name).read_bytes())
    start = time.perf_counter()
    procs: list[subprocess.Popen[bytes]] = []
    for exports, argv in commands:
        env = dict(os.environ, **exports)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        log = (launch / f"node-{len(procs)}.log").open("wb")
        procs.append(subprocess.Popen(argv, cwd=launch, env=env, stdout=log, stderr=log))
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - start
    if any(codes) or not (launch / "result.json").exists():
        raise SystemExit(f"bare deepspeed failed ({codes}), see {launch}")
    return elapsed


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f} to {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="counted rounds")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29820)
    parser.add_argument("--cold", action="store_true", help="also time a cold-cache launch")
    parser.add_argument("--keep", type=Path, help="keep every run and launch directory here")
    args = parser.parse_args()

    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"one point: 2 embedded nodes x 1 process, {args.steps} steps ({args.warmup} warm-up)")
    names = ("dtrun deepspeed", "bare deepspeed", "dtrun torchrun", "bare, quick exit")
    walls: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="dtrun-ds-bare-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        commands: list[tuple[dict[str, str], list[str]]] = []
        plan = workdir
        for round_ in range(args.rounds + 1):
            times = {}
            times[names[0]], run_id = dtrun("deepspeed", args, args.port, workdir, env)
            if round_ == 0:
                plan = workdir / run_id / "plan" / "n2"
                commands = bare_commands(plan, args.port + 10)
                print("bare: " + " & ".join(shlex.join(argv) for _, argv in commands))
            times[names[1]] = bare(commands, plan, workdir)
            times[names[2]], _ = dtrun("torchrun", args, args.port + 20, workdir, env)
            times[names[3]] = bare(commands, plan, workdir, quick=True)
            if round_:
                for name in names:
                    walls[name].append(times[name])
            label = "warm-up" if round_ == 0 else f"round {round_}"
            print(f"{label:>8}: " + "   ".join(f"{n} {times[n]:6.2f} s" for n in names))
        cold = None
        if args.cold:
            cold_env = dict(env, TORCH_EXTENSIONS_DIR=str(workdir / "empty-torch-extensions"))
            cold, _ = dtrun("deepspeed", args, args.port, workdir, cold_env)

    dt, bd, tr, qx = (walls[name] for name in names)
    print()
    for name in names:
        w = walls[name]
        print(f"{name:<16} median {statistics.median(w):6.2f} s ({min(w):.2f} to {max(w):.2f})")
    print(
        f"dtrun deepspeed / bare deepspeed: {spread([a / b for a, b in zip(dt, bd, strict=True)])}"
    )
    print(
        f"dtrun deepspeed / dtrun torchrun: {spread([a / b for a, b in zip(dt, tr, strict=True)])}"
    )
    print(
        f"bare deepspeed / dtrun torchrun:  {spread([a / b for a, b in zip(bd, tr, strict=True)])}"
    )
    own = spread([a / b for a, b in zip(dt, qx, strict=True)])
    print(f"dtrun deepspeed / bare, quick exit: {own}")
    if cold is not None:
        print(
            f"dtrun deepspeed with an empty TORCH_EXTENSIONS_DIR: {cold:.2f} s "
            f"({cold - statistics.median(dt):+.1f} s against the median)"
        )


if __name__ == "__main__":
    main()
