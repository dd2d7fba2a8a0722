"""The GPU check (issue 41): what one GPU machine gives, in one run of at most 8 minutes, written
as one JSON file and a Markdown table for docs/benchmarks.md. benchmarks/gpu.sh runs it.

Each part runs `dtrun bench` on the embedded cluster's one node, which has every GPU of the
machine (docs/bench.md "The embedded local cluster").

1. All-reduce across every GPU of the machine (`dtrun bench --workload allreduce`, one node, a
   process per GPU), under NCCL's default choice and under NCCL_ALGO=Ring: the large-message
   busbw (the largest size's in-place busbw, not nccl-tests' average over sizes). One GPU has
   nothing to all-reduce with: the JSON says so.
2. The built-in training workload in bf16 on every GPU with the largest GPT preset that runs
   (tried largest first; one that runs out of memory gives way to the next): tokens/s, TFLOP/s
   per GPU and MFU against the GPU's dense bf16 peak (docs/facts.md §7: 6N + attention FLOPs per
   token; the peak from dtrun's catalog by the GPU's name, or --peak-tflops).
3. A user program through the step hook: tests/programs/lightning_loop.py (a Lightning Trainer,
   DDP, bf16-mixed) under `dtrun bench -- PROGRAM`, and the same program under bare torchrun:
   the hook's cost is the ratio of the two runs' median step times by the program's own clock
   (3 pairs, bare then hooked; their median).

--small shrinks every size so that the whole check runs on a CPU machine in a few minutes
(processes on the CPU, gloo, float32, the tiny preset): that is how the tests run it.

    .venv/bin/python benchmarks/gpu_check.py [--small] [--out DIR] [--peak-tflops T]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DTRUN = [sys.executable, "-m", "dtrun.cli"]
PROGRAM = REPO / "tests" / "programs" / "lightning_loop.py"
PRESETS = ("1.3b", "760m", "350m", "125m")  # largest first (runner/plan/presets.py)
SCHEMA = "dtrun.gpu-check/1"


def machine(gpus: int) -> dict[str, Any]:
    import torch  # the nodes' torch: the one this Python runs

    said: dict[str, Any] = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpus": gpus,
    }
    if gpus:
        said["gpu_name"] = torch.cuda.get_device_name(0)
        said["cuda"] = torch.version.cuda
        said["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
        smi = shutil.which("nvidia-smi")
        if smi:
            query = "--query-gpu=driver_version,clocks.max.sm,power.limit"
            done = subprocess.run(
                [smi, query, "--format=csv,noheader"], capture_output=True, text=True, check=False
            )
            said["nvidia_smi"] = done.stdout.strip().splitlines()[:1]
    return said


def peak_of(name: str | None) -> tuple[float | None, str]:
    """The dense bf16 peak of a GPU by its name, from dtrun's catalog (docs/facts.md §5)."""
    from dtrun.azure.catalog import A100_80, H100, H200

    if not name:
        return None, "no GPU"
    if "PCIe" in name or "NVL" in name:
        return None, f"{name}: not an SXM part, give --peak-tflops"
    for model, gpu in (("H200", H200), ("H100", H100), ("A100", A100_80)):
        if model in name:
            return gpu.peak_bf16_tflops, f"{gpu.model} in dtrun's catalog"
    return None, f"{name}: not in dtrun's catalog, give --peak-tflops"


def dtrun(*args: str, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> int:
    started = time.monotonic()
    done = subprocess.run(
        [*DTRUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    print(f"  dtrun {' '.join(args[:6])} ...: exit {done.returncode}, "
          f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
    if done.returncode not in (0, 5):
        print(done.stdout[-1500:] + done.stderr[-1500:], flush=True)
    return done.returncode


def result(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "n1" / "r0" / "result.json").read_text())
    return data


def allreduce(work: Path, procs: int, small: bool, port: int) -> dict[str, Any]:
    if procs < 2:
        return {"skipped": "one GPU: an all-reduce needs two"}
    sizes = "1M:4M" if small else "256M:4G"
    out: dict[str, Any] = {"processes": procs, "sizes": sizes, "dtype": "float32"}
    for name, env in (("default", {}), ("ring", {"NCCL_ALGO": "Ring"})):
        run_id = f"allreduce-{name}"
        args = ["bench", "--workload", "allreduce", "--nodes", "1", "-p", str(procs), "--sizes",
                sizes, "--repeat", "1", "--quiet", "--port", str(port), "--output", "runs",
                "--run-id", run_id]  # fmt: skip
        args += [x for key, value in env.items() for x in ("--env", f"{key}={value}")]
        port += 2
        if dtrun(*args, cwd=work, timeout=240) != 0:
            out[name] = {"failed": True}
            continue
        data = result(work / "runs" / run_id)
        largest = data["rows"][-1]
        out[name] = {
            "backend": data["backend"],
            "size_bytes": largest["size"],
            "busbw_gbs": largest["in_place"]["busbw"],
            "algbw_gbs": largest["in_place"]["algbw"],
            "avg_busbw_gbs": data["avg_busbw"],
        }
    return out


def training(work: Path, procs: int, small: bool, peak: float | None, port: int) -> dict[str, Any]:
    presets = ("tiny",) if small else PRESETS
    tried = []
    for preset in presets:
        run_id = f"train-{preset}"
        args = ["bench", "--nodes", "1", "-p", str(procs), "--preset", preset, "--repeat", "1",
                "--steps", "6" if small else "30", "--warmup", "2" if small else "5", "--quiet",
                "--port", str(port), "--output", "runs", "--run-id", run_id,
                "--dtype", "float32" if small else "bfloat16"]  # fmt: skip
        port += 2
        if dtrun(*args, cwd=work, timeout=300) != 0:
            tried.append(preset)  # out of memory, or failed: the next size down
            continue
        data = result(work / "runs" / run_id)
        tflops = data["tokens_per_s"] * data["flops_per_token"] / data["world_size"] / 1e12
        return {
            "preset": preset,
            "did_not_run": tried,
            "params": data["model"]["params"],
            "dtype": data["dtype"],
            "processes": data["world_size"],
            "tokens_per_s": data["tokens_per_s"],
            "step_time_s_p50": data["step_time_s"]["p50"],
            "tflops_per_gpu": tflops,
            "peak_tflops": peak,
            "mfu": tflops / peak if peak else None,
        }
    return {"failed": True, "did_not_run": tried}


def own_median(directory: Path, warmup: int) -> float:
    own = json.loads((directory / "own-times-rank0.json").read_text())
    return float(statistics.median(own[warmup:]))


def user_program(work: Path, procs: int, small: bool, port: int) -> dict[str, Any]:
    options = ["--steps", "20", "--sleep", "0", "--width", "64" if small else "8192"]
    if not small:
        options += ["--precision", "bf16-mixed"]
    bare = work / "bare"
    bare.mkdir()
    rounds: list[float] = []
    hooked_steps: list[float] = []
    for index in range(1 if small else 3):  # alternating: bare, hooked
        done = subprocess.run(
            [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(procs), str(PROGRAM),
             *options], cwd=bare, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            return {"failed": "bare torchrun: " + done.stderr[-600:]}
        base = own_median(bare, 5)
        run_id = f"program-{index}"
        code = dtrun("bench", "--nodes", "1", "-p", str(procs), "--repeat", "1", "--warmup", "5",
                     "--quiet", "--port", str(port + 2 * index), "--output", "runs", "--run-id",
                     run_id, "--", "python", str(PROGRAM), *options,
                     cwd=work, timeout=240)  # fmt: skip
        if code != 0:
            return {"failed": f"dtrun bench -- PROGRAM: exit {code}"}
        run = work / "runs" / run_id
        hooked = own_median(run / "n1" / "r0", 5)
        hooked_steps.append(statistics.median(result(run)["step_times_s"]))
        rounds.append(hooked / base)
    return {
        "program": "tests/programs/lightning_loop.py " + " ".join(options),
        "processes": procs,
        "hook_cost_ratios": rounds,
        "hook_cost_ratio_median": statistics.median(rounds),
        "step_time_s_hooked_median": statistics.median(hooked_steps),
    }


def table(said: dict[str, Any]) -> str:
    m = said["machine"]
    where = f"{m.get('gpus')} x {m.get('gpu_name', 'CPU')}, torch {m['torch']}"
    rows = [f"GPU check on {where} ({said['finished_at']}, {said['seconds']:.0f} s)", "",
            "| measure | figure |", "|---|---|"]  # fmt: skip
    ar = said["allreduce"]
    if "skipped" in ar:
        rows.append(f"| all-reduce busbw | not measured: {ar['skipped']} |")
    for name in ("default", "ring"):
        if name in ar and "busbw_gbs" in ar[name]:
            one = ar[name]
            rows.append(f"| all-reduce busbw, {one['size_bytes'] / 2**20:g} MiB, "
                        f"NCCL_ALGO {name} | {one['busbw_gbs']:.1f} GB/s |")  # fmt: skip
    train = said["training"]
    if "tokens_per_s" in train:
        mfu = f"{train['mfu']:.1%}" if train["mfu"] is not None else "no peak known"
        rows.append(f"| training, GPT {train['preset']} in {train['dtype']} | "
                    f"{train['tokens_per_s']:,.0f} tokens/s, {train['tflops_per_gpu']:.1f} "
                    f"TFLOP/s per GPU, MFU {mfu} |")  # fmt: skip
    program = said["program"]
    if "hook_cost_ratio_median" in program:
        ratio, each = program["hook_cost_ratio_median"], program["hook_cost_ratios"]
        rows.append(f"| step hook's cost on a Lightning program | {ratio:.3f} "
                    f"({min(each):.3f}-{max(each):.3f}, {len(each)} pairs; hooked / bare "
                    "step time) |")  # fmt: skip
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="every size shrunk: a CPU test")
    parser.add_argument("--out", type=Path, default=Path("gpu-check"))
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--port", type=int, default=30400)
    args = parser.parse_args()
    import torch

    gpus = torch.cuda.device_count()
    if not gpus and not args.small:
        print("gpu_check: no GPU here; --small runs the check on the CPU", file=sys.stderr)
        return 2
    procs = gpus if gpus else 2
    started = time.monotonic()
    said: dict[str, Any] = {"schema": SCHEMA, "small": args.small, "machine": machine(gpus)}
    peak, source = (
        (args.peak_tflops, "--peak-tflops")
        if args.peak_tflops
        else peak_of(said["machine"].get("gpu_name"))
    )
    said["peak"] = {"tflops": peak, "source": source}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dtrun-gpu-check-") as tmp:
        work = Path(tmp)
        print("all-reduce", flush=True)
        said["allreduce"] = allreduce(work, procs, args.small, args.port)
        print("training", flush=True)
        said["training"] = training(work, procs, args.small, peak, args.port + 10)
        print("a user program through the step hook", flush=True)
        said["program"] = user_program(work, procs, args.small, args.port + 30)
    said["seconds"] = time.monotonic() - started
    said["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (args.out / "gpu-check.json").write_text(json.dumps(said, indent=1) + "\n")
    (args.out / "gpu-check.md").write_text(table(said))
    print(table(said))
    failed = [k for k in ("allreduce", "training", "program") if "failed" in json.dumps(said[k])]
    if failed:
        print(f"gpu_check: failed: {', '.join(failed)}", file=sys.stderr)
        for part in failed:  # what each failed part said, so a log alone shows why
            print(f"{part}: {json.dumps(said[part])[-1500:]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
