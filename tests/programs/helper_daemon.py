"""A program that starts a helper daemon as some libraries do: with a cleared environment, so
without dtrun's DTRUN_LAUNCH tag, and by a double fork, so that its parent ends at once and the
daemon is reparented (to init, where nothing adopts it). It writes the daemon's pid to
DIR/daemon-RANK.pid, then takes a few gloo all-reduces as training would, and exits, or, with
--hold, waits to be stopped.

Usage: python helper_daemon.py --pids DIR [--hold]
"""

import argparse
import os
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--pids", type=Path, required=True)
parser.add_argument("--hold", action="store_true", help="wait to be stopped instead of exiting")
args = parser.parse_args()

# env -i: nothing of this environment; setsid: a session of its own, out of the process group
# torchrun stops its worker by; sh starts sleep in the background and exits. The daemon keeps no
# descriptor of ours (its parent's pipe would hold run() until it ends) and lives in /.
started = subprocess.run(
    ["env", "-i", "setsid", "sh", "-c", "sleep 1000 </dev/null >/dev/null 2>&1 & echo $!"],
    capture_output=True, text=True, check=True, cwd="/",
)  # fmt: skip
rank = os.environ["RANK"]
(args.pids / f"daemon-{rank}.pid").write_text(started.stdout.strip())

dist.init_process_group("gloo")
for _ in range(3):
    dist.all_reduce(torch.ones(8))
dist.destroy_process_group()
while args.hold:
    time.sleep(1)
