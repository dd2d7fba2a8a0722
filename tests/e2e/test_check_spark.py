"""`dtrun check --spark` on a real standalone Spark (tests/sparkstandalone.py: a master and two
workers on 127.0.0.41 and .42, each executor its worker's child): the nodes are named by the
host of the executor each ran on, and the check's Spark application ends with it
(docs/check.md). Grouped with the other Spark tests (tests/machine.py)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.conftest import launch_processes, run_dtrun, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def standalone(tmp_path_factory):
    from tests import sparkstandalone

    if shutil.which("java") is None:  # ./dev test installs it: missing is a broken setup
        pytest.fail("Spark needs Java: run ./dev setup (apt-get install default-jre-headless)")
    cluster = sparkstandalone.start(tmp_path_factory.mktemp("spark-check"))
    yield cluster
    cluster.close()


def test_a_clean_check_on_standalone_spark_names_the_executors_hosts_and_ends_its_app(
    standalone, no_leftovers
):
    from tests import sparkstandalone

    done = run_dtrun(
        "check", "--spark", standalone.url, "--local-nodes", "2", "--port", "29900", "--json",
        "--output", str(no_leftovers / "runs"), "--run-id", "check",
        cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    # Spark chooses which worker runs which barrier task: the hosts, in either order
    hosts = [node["host"] for node in data["nodes"]]
    assert sorted(hosts) == list(sparkstandalone.WORKERS), data
    assert [node["verdict"] for node in data["nodes"]] == ["ok", "ok"]
    assert [(link["a"], link["b"], link["verdict"]) for link in data["links"]] == [(*hosts, "ok")]
    # the application is gone: the master removed it, and its executors ended
    launch = no_leftovers / "runs" / "check" / "check"
    found = re.search(r"on Spark application (\S+):", (launch / "spark-driver.log").read_text())
    assert found is not None, (launch / "spark-driver.log").read_text()
    app = found.group(1)
    master_log = standalone.root / "master.log"
    wait_for(
        lambda: f"Removing app {app}" in master_log.read_text(errors="replace"),
        timeout=60,
        what=f"the master to remove {app}",
    )
    wait_for(
        lambda: sparkstandalone.executor_pids(0) + sparkstandalone.executor_pids(1) == [],
        timeout=60,
        what="the check's executors to end",
    )
    wait_for(lambda: launch_processes() == [], timeout=30, what="no process of the launch")
