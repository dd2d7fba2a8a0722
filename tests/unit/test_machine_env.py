"""This machine's environment (issue 36): manifest.json records only the variables that shape a
run, redacted; every secret-named value in it is known to the redaction; an embedded node starts
with a login's variables and the run-shaping ones, not dtrun's whole environment."""

from __future__ import annotations

import json

import pytest

from dtrun import redact
from dtrun.cli.common import command_secrets
from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.redact import REDACTED, Redactor, redact_text, remember_secrets
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir

# What the machine the issue was found on held, and what shapes a run.
PLANTED = {
    "GPG_PASSPHRASE": "GpgPassphraseCore1",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0AB/B0CD/SlackHookCore2",
    "AWS_SECRET_ACCESS_KEY": "AwsSecretCore3",
    "DB_PW": "DbPwCore4",
    "MY_NOTE": "plain-note-value",
    "NCCL_SOCKET_IFNAME": "eth0",
    "TORCH_HUB_TOKEN": "TorchHubCore5",
    "OMP_PROC_BIND": "close",
    "UCX_TLS": "rc,sm",
    "FI_PROVIDER": "efa",
    "OMPI_MCA_btl": "^openib",
    "OMPI_COMM_WORLD_RANK": "3",
    "SLURM_JOB_ID": "4242",
    "MASTER_ADDR": "10.9.9.9",
    "LC_ALL": "C.UTF-8",
}


@pytest.fixture
def planted(monkeypatch):
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(redact, "_process", Redactor())


def test_the_manifest_records_only_what_shapes_a_run(planted, tmp_path, fixed_inventory):
    run_dir = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r"), fixed_inventory, {1: [1000]})
    recorded = json.loads(run_dir.manifest.read_text())["environment"]
    assert {name: recorded.get(name) for name in PLANTED} == {
        "GPG_PASSPHRASE": None, "SLACK_WEBHOOK_URL": None, "AWS_SECRET_ACCESS_KEY": None,
        "DB_PW": None, "MY_NOTE": None, "LC_ALL": None,
        "NCCL_SOCKET_IFNAME": "eth0", "TORCH_HUB_TOKEN": REDACTED, "OMP_PROC_BIND": "close",
        "UCX_TLS": "rc,sm", "FI_PROVIDER": "efa", "OMPI_MCA_btl": "^openib",
        "OMPI_COMM_WORLD_RANK": "3", "SLURM_JOB_ID": "4242", "MASTER_ADDR": "10.9.9.9",
    }  # fmt: skip
    assert not {"HOME", "USER", "PWD", "TERM", "SHELL"} & set(recorded)
    assert list(recorded) == sorted(recorded)


def test_run_shaping_families_are_chosen_by_name():
    from dtrun.plan.machineenv import run_environment

    env = {"PYTHONHASHSEED": "0", "PYTHONPATH": "/x", "LD_LIBRARY_PATH": "/l", "HOME": "/h",
           "CUDA_VISIBLE_DEVICES": "0,1", "HOROVOD_FUSION_THRESHOLD": "1", "DS_ACCELERATOR": "cpu",
           "TOKENIZERS_PARALLELISM": "false", "PATH": "/bin", "EDITOR": "vi"}  # fmt: skip
    assert list(run_environment(env)) == [
        "CUDA_VISIBLE_DEVICES", "DS_ACCELERATOR", "HOROVOD_FUSION_THRESHOLD", "LD_LIBRARY_PATH",
        "PYTHONHASHSEED", "PYTHONPATH",
    ]  # fmt: skip


def test_an_embedded_node_starts_with_a_login_and_the_machine_s_run_settings():
    from dtrun.plan.machineenv import node_environment

    env = {**PLANTED, "PATH": "/usr/bin", "HOME": "/home/u", "USER": "u", "TERM": "xterm",
           "TMPDIR": "/scratch", "PYTEST_XDIST_WORKER": "gw0", "EDITOR": "vi"}  # fmt: skip
    assert node_environment(env) == {
        "PATH": "/usr/bin", "HOME": "/home/u", "USER": "u", "TERM": "xterm", "TMPDIR": "/scratch",
        "LC_ALL": "C.UTF-8", "NCCL_SOCKET_IFNAME": "eth0", "TORCH_HUB_TOKEN": "TorchHubCore5",
        "OMP_PROC_BIND": "close", "UCX_TLS": "rc,sm", "FI_PROVIDER": "efa",
        "OMPI_MCA_btl": "^openib",
    }  # fmt: skip


def test_an_embedded_node_sees_none_of_dtrun_s_other_variables(planted):
    """The executor's own nodes, run with bash: the login's and run-shaping variables, and the
    node's name; no secret of this machine, no variable that shapes nothing."""
    (answer,) = LocalExecutor().command({"node-0": "env -0"}).values()
    assert answer.exit_code == 0, answer.output
    seen = dict(line.split("=", 1) for line in answer.output.split("\0") if "=" in line)
    assert seen["DTRUN_NODE_NAME"] == "node-0" and "PATH" in seen and "HOME" in seen
    assert seen["NCCL_SOCKET_IFNAME"] == "eth0" and seen["OMPI_MCA_btl"] == "^openib"
    hidden = {"GPG_PASSPHRASE", "SLACK_WEBHOOK_URL", "AWS_SECRET_ACCESS_KEY", "DB_PW", "MY_NOTE",
              "OMPI_COMM_WORLD_RANK", "SLURM_JOB_ID", "MASTER_ADDR"}  # fmt: skip
    assert hidden & set(seen) == set()


def test_every_secret_named_value_of_this_machine_is_known_to_the_redaction(
    planted, monkeypatch, tmp_path
):
    key_file = tmp_path / "sa.json"
    key_file.write_text("{}")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    monkeypatch.setenv("AUTH_MODE", "disabled")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    secrets = command_secrets(BenchSpec(run_id="r"))
    assert {"GpgPassphraseCore1", "AwsSecretCore3", "DbPwCore4", "TorchHubCore5"} <= set(secrets)
    assert not {str(key_file), str(tmp_path), "disabled"} & set(secrets)
    remember_secrets(secrets)
    line = f"key AwsSecretCore3 pw {PLANTED['SLACK_WEBHOOK_URL']} in {tmp_path}/sa.json"
    assert redact_text(line) == f"key {REDACTED} pw https://{REDACTED} in {tmp_path}/sa.json"


def _sizes_raising(tmp_path, raising: str):
    """`dtrun sizes` in a subprocess whose catalog runs ``raising`` (Python defining
    ``known_sizes``, which raises a ValueError quoting WANDB_API_KEY's value)."""
    import subprocess
    import sys

    program = (
        "import os, threading, dtrun.azure.catalog as c\n"
        "def bug():\n"
        "    raise ValueError('token ' + os.environ['WANDB_API_KEY'])\n"
        f"{raising}"
        "c.known_sizes = known_sizes\n"
        "from dtrun.cli.app import main\n"
        "import sys; sys.argv = ['dtrun', 'sizes']\n"
        "main()\n"
    )
    env = {"PATH": "/usr/bin:/bin", "WANDB_API_KEY": "WandbKeyOf32CharactersXyz0123456"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert f"ValueError: token {REDACTED}" in done.stderr, done.stderr
    assert "WandbKeyOf32" not in done.stderr + done.stdout
    return done


def test_a_bug_s_traceback_masks_the_machine_s_secrets(tmp_path):
    """An exception that escapes dtrun (a bug, not its own error) keeps its traceback and exit
    1, with this machine's secrets masked in it. Before, typer printed it whole: a message that
    quoted a secret-named variable's value showed it."""
    done = _sizes_raising(tmp_path, "known_sizes = bug\n")
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr


def test_a_bug_in_one_of_dtrun_s_threads_masks_the_machine_s_secrets(tmp_path):
    """threading's own printer showed a thread's exception whole (an output pump's bug)."""
    done = _sizes_raising(
        tmp_path,
        "def known_sizes():\n"
        "    t = threading.Thread(target=bug, name='pump-0'); t.start(); t.join()\n"
        "    return []\n",
    )
    assert "Exception in thread pump-0:" in done.stderr, done.stderr
