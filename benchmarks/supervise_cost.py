"""The SSH executor's wait on a launch's nodes (runner/engines/ssh/executor.py, _supervise):
dtrun's CPU a node as the node count grows, against the wait it replaced (issue 41, "linear or
better").

The nodes here are asyncio tasks that end one at a time, each on a turn of the loop of its
own, as the ends of a real launch's nodes come (tens of microseconds to seconds apart): the
worst case for a wait that looks at every pending task at each end. What is timed (CPU, best
of --rounds) is the whole run: the tasks, their ends and the wait. The baseline is the loop
the executor had until 2026-12-06, verbatim but for its failure and timeout branches (not
taken here): asyncio.wait(FIRST_COMPLETED) over every pending task at each end.

    .venv/bin/python benchmarks/supervise_cost.py [--nodes 256,1024,4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dtrun.engines.ssh.ended import Ended
from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.execute.success import Next, after_exit
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch


def plan_of(count: int) -> LaunchPlan:
    hosts = ", ".join(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(1, count + 1))
    inventory = parse_hosts_file(
        f"user: u\nhosts: [{hosts}]\n", "hosts.yaml", Defaults("u", sys.prefix + "/bin")
    )
    nodes = inventory.nodes
    launches = tuple(
        NodeLaunch(node, rank, f"node-{rank}.sh", "true\n") for rank, node in enumerate(nodes)
    )
    return LaunchPlan(
        "tensorflow", "program", count, 1, count, None, "id", nodes[0].address, 1, launches, (),
        nodes,
    )  # fmt: skip


async def baseline(plan: LaunchPlan, tasks: dict[Any, NodeLaunch], ended: dict[str, Ended]) -> None:
    """The wait before 2026-12-06 (its success path)."""
    pending = set(tasks)
    while any(not tasks[task].service for task in pending):
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            result = task.result()
            ended[result.launch.node.name] = result
            step = after_exit(plan.success, result.launch, result.exit_code or 0)
            if step is Next.DONE:
                return


async def current(plan: LaunchPlan, tasks: dict[Any, NodeLaunch], ended: dict[str, Ended]) -> None:
    executor = SshExecutor.__new__(SshExecutor)  # _supervise reads none of its state
    assert await executor._supervise(plan, tasks, ended, float("inf"), Path("/nonexistent")) is None


def run_once(count: int, wait: Any) -> float:
    plan = plan_of(count)

    async def main() -> None:
        gates = [asyncio.get_running_loop().create_future() for _ in plan.launches]

        async def node(launch: NodeLaunch, gate: asyncio.Future[None]) -> Ended:
            await gate
            return Ended(launch, 0, 0.0)

        tasks = {
            asyncio.create_task(node(one, gate)): one
            for one, gate in zip(plan.launches, gates, strict=True)
        }
        ended: dict[str, Ended] = {}

        async def ends() -> None:
            for gate in gates:  # one end a turn of the loop
                gate.set_result(None)
                await asyncio.sleep(0)
                await asyncio.sleep(0)

        await asyncio.gather(ends(), wait(plan, tasks, ended))
        assert len(ended) == count

    started = time.process_time()
    asyncio.run(main())
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="256,1024,4096")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'before ms':>10} {'now ms':>8} {'before us/node':>15} "
          f"{'now us/node':>12} {'now/before':>10}")  # fmt: skip
    for count in (int(n) for n in args.nodes.split(",")):
        before = min(run_once(count, baseline) for _ in range(args.rounds))
        now = min(run_once(count, current) for _ in range(args.rounds))
        print(f"{count:>6} {before * 1e3:>10.1f} {now * 1e3:>8.1f} {before / count * 1e6:>15.1f} "
              f"{now / count * 1e6:>12.1f} {now / before:>10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
