"""The embedded cluster keeps each simulated node to its own share of this machine's cores
(runner/engines/embedded/inventory.py node_cores; docs/bench.md "The embedded local cluster")."""

from __future__ import annotations

import os

from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.engines.embedded.inventory import embedded_inventory, local_cluster, node_cores
from dtrun.record.rundir import machine


def _cluster(size: int, cpu_count: int):
    return local_cluster(size, python_bin="python3", code_dir="/opt/dtrun", cpu_count=cpu_count)


def test_each_node_takes_its_own_share_of_the_cores_in_order():
    assert node_cores(_cluster(2, 4), range(4)) == {"node-0": (0, 1), "node-1": (2, 3)}
    assert node_cores(_cluster(2, 2), [4, 7]) == {"node-0": (4,), "node-1": (7,)}


def test_nodes_beyond_the_cores_wrap_round_onto_them():
    assert node_cores(_cluster(4, 2), [0, 1]) == {
        "node-0": (0,),
        "node-1": (1,),
        "node-2": (0,),
        "node-3": (1,),
    }


def test_the_shares_are_of_the_cores_dtrun_may_use_not_the_machine_s(monkeypatch):
    # eight cores, two of them dtrun's (a container's cpuset, a taskset around dtrun)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {2, 3})
    inventory = embedded_inventory(2)
    assert [node.cpus for node in inventory.nodes] == [1, 1]
    assert node_cores(inventory, [2, 3]) == {"node-0": (2,), "node-1": (3,)}
    assert machine()["cpu_count"] == 8 and machine()["usable_cpus"] == 2


def test_a_node_s_processes_run_only_on_its_cores():
    allowed = sorted(os.sched_getaffinity(0))
    cores = {"node-0": (allowed[0],), "node-1": (allowed[-1],)}
    answers = LocalExecutor(cores=cores).command(
        {name: "grep Cpus_allowed_list /proc/self/status" for name in cores}
    )
    for name, answer in answers.items():
        assert answer.exit_code == 0, answer.output
        assert answer.output.split()[-1] == str(cores[name][0])
    # no cores given: the node runs wherever dtrun may
    count = "python3 -c 'import os; print(len(os.sched_getaffinity(0)))'"
    (free,) = LocalExecutor().command({"node-0": count}).values()
    assert free.output.split()[-1] == str(len(allowed))
