"""The TorchDistributor task as executors run it (runner/engines/spark/task.py): it does what
TorchDistributor's own helpers do, held equal to them here, without importing pyspark.ml."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.ml.torch.distributor import TorchDistributor
from pyspark.ml.torch.log_communication import LogStreamingServer  # type: ignore[attr-defined]

from dtrun.engines.spark import distributor, task
from tests.paths import REPO

UNPICKLE = """\
import sys
from pyspark import cloudpickle
cloudpickle.loads(sys.stdin.buffer.read())
print(sorted(m for m in sys.modules if m.startswith("pyspark.ml")))
"""


def test_an_executor_unpickles_the_stage_s_task_without_importing_pyspark_ml():
    stage_task = task.read_input_first(
        task.node_task(2, {"num_processes": 2}, "127.0.0.1", -1, 29401, "ab", "m", ("a",))
    )
    from pyspark import cloudpickle

    done = subprocess.run(
        [sys.executable, "-c", UNPICKLE], input=cloudpickle.dumps(stage_task),
        capture_output=True, cwd=REPO, check=True,
    )  # fmt: skip
    assert done.stdout.decode().strip() == "[]", done.stderr.decode()


@pytest.mark.parametrize("gpus", ["", "0,1"])
def test_the_rendezvous_arguments_are_torchdistributors(gpus, monkeypatch):
    environment = {
        "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29500", "RANK": "3",
        "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID": "f00d", "CUDA_VISIBLE_DEVICES": gpus,
    }  # fmt: skip
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    for local in (False, True):
        theirs, per_node = TorchDistributor._get_torchrun_args(local_mode=local, num_processes=8)
        params = {"local_mode": local, "num_processes": 8, task.CODE: "pass"}
        ours = task.torchrun_command(params, "mod", "x")
        assert ours == [sys.executable, "-c", "pass", *theirs, f"--nproc_per_node={per_node}",
                        "--module", "mod", "x"]  # fmt: skip
        # dtrun's own addition: torchrun's logs in the launch's directory, not a new /tmp one
        logged = task.torchrun_command({**params, task.LOG_DIR: "/l/torchelastic"}, "mod", "x")
        assert logged[-4:] == ["--log_dir=/l/torchelastic", "--module", "mod", "x"]


@pytest.mark.parametrize("lines", [3, 150])
def test_a_failed_command_raises_as_torchdistributor_s_does(lines, capfd):
    command = [sys.executable, "-c", f"for i in range({lines}): print(i)\nraise SystemExit(4)"]
    with pytest.raises(RuntimeError) as ours:
        task.stream(command)
    with pytest.raises(RuntimeError) as theirs:
        TorchDistributor._execute_command(command)
    assert str(ours.value) == str(theirs.value)
    assert capfd.readouterr().out.count("\n1\n") == 2  # each printed the output as it came


def test_the_output_reaches_the_driver_s_log_server_through_pyspark_s_client(capfd):
    server = LogStreamingServer()
    port = distributor.start_log_server(server, "127.0.0.1")
    try:
        client = task.log_client("127.0.0.1", port)
        task.stream([sys.executable, "-c", "print('from the rank')"], client)
        deadline = time.monotonic() + 10
        while "from the rank" not in capfd.readouterr().err and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.monotonic() < deadline, "the log server never printed the line"
        type(client)._destroy()
    finally:
        server.shutdown()


ZIPPED = """\
import sys
sys.path = [p for p in sys.path if "site-packages" not in p] + sys.argv[1:]
import pyspark  # as Spark's Python worker has
from dtrun.engines.spark.task import log_client
client = log_client("127.0.0.1", -1)
print(type(client).__name__, pyspark.__file__, "pyspark.ml" in sys.modules)
"""


def test_the_log_client_loads_from_pyspark_zip_as_executors_import_pyspark():
    """Spark's Python workers import pyspark from SPARK_HOME/python/lib/pyspark.zip."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    done = subprocess.run(
        [sys.executable, "-c", ZIPPED, *map(str, sorted(lib.glob("*.zip"))), str(REPO)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    name, where, imported_ml = done.stdout.split()
    assert (name, imported_ml) == ("LogStreamingClient", "False")
    assert "pyspark.zip" in where
