"""The embedded cluster gives each simulated node its share of this machine's NVIDIA GPUs, by
CUDA_VISIBLE_DEVICES, where there is one for each node (runner/engines/embedded/inventory.py;
docs/bench.md "The embedded local cluster")."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.engines.embedded.inventory import local_cluster, visible_gpus
from dtrun.spec.cluster import Accelerator


def _driver(tmp_path: Path, gpus: int) -> Path:
    driver = tmp_path / "gpus"
    driver.mkdir()
    for index in range(gpus):
        (driver / f"0000:{index:02x}:00.0").mkdir()
    return driver


def _cluster(size: int, gpus: tuple[str, ...]):
    return local_cluster(size, python_bin="python3", code_dir="/opt/dtrun", cpu_count=16, gpus=gpus)


def test_the_gpus_are_those_the_driver_lists(tmp_path):
    assert visible_gpus({}, _driver(tmp_path, 2), tmp_path) == ("0", "1")


def test_without_the_driver_s_list_the_device_files_count(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_gpus({}, tmp_path / "no-driver", tmp_path) == ("0", "1")


def test_no_driver_and_no_device_files_is_no_gpu(tmp_path):
    assert visible_gpus({}, tmp_path / "no-driver", tmp_path) == ()
    # a CPU machine with the variable set (an image's or a CI's environment) stays one
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0"}, tmp_path / "no-driver", tmp_path) == ()


def test_cuda_visible_devices_decides_as_cuda_reads_it(tmp_path):
    driver = _driver(tmp_path, 4)
    shown = {
        "2,3": ("2", "3"),
        " 1 , 0 ": ("1", "0"),
        "": (),  # the usual way to hide every GPU
        "-1": (),
        "0,-1,1": ("0",),  # CUDA stops at the first entry naming no GPU
        "GPU-8a3c2f4e-0000-1111-2222-333344445555": ("GPU-8a3c2f4e-0000-1111-2222-333344445555",),
        "0;rm -rf /": (),
        "1,7": ("1",),  # the driver lists 4: index 7 names none
        "0,1,0": (),  # named twice: PyTorch sees none
        "0,00": (),  # the same GPU twice, as PyTorch reads an index
        "01,2": ("1", "2"),
        "\u0663": (),  # an Arabic-Indic 3: a digit to Python, no GPU to CUDA
    }
    for value, gpus in shown.items():
        assert visible_gpus({"CUDA_VISIBLE_DEVICES": value}, driver, tmp_path) == gpus, value


def test_each_node_takes_an_equal_share_of_the_gpus_in_order():
    inventory = _cluster(2, ("0", "1", "2", "3"))
    assert inventory.accelerator is Accelerator.CUDA
    assert [(node.gpus, node.slots) for node in inventory.nodes] == [
        (("0", "1"), 2),
        (("2", "3"), 2),
    ]
    # what does not divide evenly stays unused
    assert [node.gpus for node in _cluster(2, ("0", "1", "2")).nodes] == [("0",), ("1",)]


def test_fewer_gpus_than_nodes_runs_every_node_on_the_cpu():
    for gpus in ((), ("0",)):
        inventory = _cluster(2, gpus)
        assert inventory.accelerator is Accelerator.CPU
        assert [(node.gpus, node.slots) for node in inventory.nodes] == [(None, 1), (None, 1)]


def test_a_node_s_processes_see_only_its_gpus():
    gpus = {"node-0": ("0", "1"), "node-1": ("GPU-ab12",)}
    answers = LocalExecutor(gpus=gpus).command(
        {"node-0": 'echo "[$CUDA_VISIBLE_DEVICES]"', "node-1": 'echo "[$CUDA_VISIBLE_DEVICES]"'}
    )
    assert answers["node-0"].output.split()[-1] == "[0,1]"
    assert answers["node-1"].output.split()[-1] == "[GPU-ab12]"
    assert LocalExecutor().pinned("node-0", ["bash"]) == ["bash"]


def test_more_processes_than_a_node_s_gpus_is_refused_before_anything_runs():
    from dtrun.errors import PlanError
    from dtrun.plan.launchfiles import require_nodes

    one_each = _cluster(2, ("0", "1"))
    require_nodes(one_each, 2, 1)
    with pytest.raises(PlanError, match="cannot run 2 processes per node on node-0") as raised:
        require_nodes(one_each, 2, 2)
    assert raised.value.exit_code == 2
    assert "pass -p 1 or fewer" in raised.value.fix
    require_nodes(_cluster(2, ()), 2, 8)  # CPU nodes: -p is the user's to choose


def test_the_report_says_how_many_gpus_each_embedded_node_had(tmp_path):
    from dtrun.report.build import build_report
    from dtrun.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    bench = BenchSpec("g", node_counts=(1, 2), repeat=2)
    run_dir = fake_run_dir(
        tmp_path / "g",
        bench,
        _cluster(2, ("0", "1", "2", "3")),
        {1: [100.0, 101.0], 2: [190.0, 191.0]},
    )
    build_report(run_dir)
    (measured,) = [
        line for line in run_dir.report.read_text().splitlines() if "Measured on" in line
    ]
    assert "embedded local cluster: 2 simulated nodes on one machine" in measured
    assert "GiB), 2 GPUs a node (" in measured  # and the first result's device name
    cpu_dir = fake_run_dir(tmp_path / "c", bench, _cluster(2, ()), {1: [100.0], 2: [190.0]})
    build_report(cpu_dir)
    (cpu_line,) = [x for x in cpu_dir.report.read_text().splitlines() if "Measured on" in x]
    assert "GPU" not in cpu_line


def _torch_at(tmp_path: Path, version_py: str, monkeypatch) -> None:
    """This interpreter's torch, as find_spec finds it, with this version.py."""
    import importlib.machinery
    import importlib.util

    folder = tmp_path / "torch"
    folder.mkdir(parents=True)
    (folder / "version.py").write_text(version_py)
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)


def test_the_build_of_torch_is_read_from_its_version_file_without_importing_it(
    tmp_path, monkeypatch
):
    from dtrun.engines.embedded.inventory import torch_cuda

    # torch 2.x writes the annotated form (this checkout's CPU build has cuda ... = None)
    _torch_at(tmp_path, "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n", monkeypatch)
    assert torch_cuda() == "13.0"
    monkeypatch.undo()
    _torch_at(
        tmp_path / "cpu", "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n", monkeypatch
    )
    assert torch_cuda() is None
    monkeypatch.undo()
    assert torch_cuda() is None  # this checkout's own torch: the CPU build ./dev installs


def test_gpus_with_a_cpu_build_of_torch_run_the_nodes_on_the_cpu_and_say_why(monkeypatch):
    from dtrun.engines.embedded import inventory

    monkeypatch.setattr(inventory, "visible_gpus", lambda: ("0", "1"))
    monkeypatch.setattr(inventory, "torch_cuda", lambda: None)
    assert inventory.embedded_inventory(2).accelerator is Accelerator.CPU
    said = inventory.gpu_warning(2)
    assert (
        said is not None and "shows dtrun 2 NVIDIA GPUs, but this Python's torch is a CPU" in said
    )
    monkeypatch.setattr(inventory, "torch_cuda", lambda: "13.0")
    assert inventory.embedded_inventory(2).accelerator is Accelerator.CUDA
    assert inventory.gpu_warning(2) is None
    said = inventory.gpu_warning(4)
    assert said is not None and "ask for at most 2 nodes (--nodes)" in said
    monkeypatch.setattr(inventory, "visible_gpus", lambda: ())
    assert inventory.gpu_warning(4) is None  # a CPU machine: nothing to say
