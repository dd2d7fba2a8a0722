"""Hosts files: YAML and MPI hostfiles -> Inventory; errors name the file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.cluster.hosts import Defaults, HostsFileError, parse_hosts_file
from runner.spec.cluster import Accelerator

DEFAULTS = Defaults(user="me", python_bin="/opt/venv/bin")


def parse(text: str):
    return parse_hosts_file(textwrap.dedent(text), "hosts.yaml", DEFAULTS)


def test_yaml_hosts_with_defaults_and_per_host_overrides():
    inventory = parse(
        """\
        user: azureuser
        key: ~/.ssh/cluster
        slots: 8
        python: /shared/venv/bin
        shared: /shared
        jump: 20.0.113.10
        size: Standard_ND96isr_H100_v5
        hosts:
          - 10.0.0.4
          - host: 10.0.0.5
            port: 2222
            slots: 4
            user: other
        """
    )
    first, second = inventory.nodes
    # no port given: the user's ssh config decides, as `ssh 10.0.0.4` would (then 22)
    assert (first.name, first.address, first.ssh_port, first.slots) == (
        "node-0",
        "10.0.0.4",
        None,
        8,
    )
    assert first.ssh_user == "azureuser"
    assert first.ssh_key == str(Path("~/.ssh/cluster").expanduser())
    assert (second.ssh_port, second.slots, second.ssh_user) == (2222, 4, "other")
    assert inventory.python_bin == "/shared/venv/bin"
    assert inventory.code_dir == "/shared/.dtrun/code"
    assert inventory.shared_dir == "/shared"
    assert inventory.ssh is not None and inventory.ssh.jump_host == "20.0.113.10"
    assert inventory.accelerator is Accelerator.CUDA  # from the size's GPUs
    assert inventory.source == "hosts:hosts.yaml"


def test_yaml_defaults_without_a_size_are_cpu_nodes_with_local_python():
    inventory = parse("hosts: [127.0.0.2, 127.0.0.3]\n")
    assert inventory.accelerator is Accelerator.CPU
    assert inventory.python_bin == "/opt/venv/bin"
    assert inventory.code_dir == "/tmp/dtrun/code"
    assert [n.address for n in inventory.nodes] == ["127.0.0.2", "127.0.0.3"]


def test_an_address_separate_from_the_ssh_host():
    inventory = parse("hosts:\n  - host: gpu-a.example.com\n    address: 10.0.0.4\n")
    assert (inventory.nodes[0].ssh_host, inventory.nodes[0].address) == (
        "gpu-a.example.com",
        "10.0.0.4",
    )


def test_mpi_hostfiles_give_hosts_and_slots():
    inventory = parse_hosts_file(
        "# the cluster\n10.0.0.4 slots=8\n\n10.0.0.5 slots=8 max_slots=8  # second\nnode3\n",
        "hostfile",
        DEFAULTS,
    )
    assert [(n.address, n.slots) for n in inventory.nodes] == [
        ("10.0.0.4", 8),
        ("10.0.0.5", 8),
        ("node3", 1),
    ]
    assert inventory.python_bin == "/opt/venv/bin"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hosts:\n  - host: a\n    prot: 22\n", "hosts.yaml, line 3: unknown field 'prot'"),
        ("hosts:\n  - host: a\n    prot: 22\n", "did you mean 'port'"),
        ("hosts:\n  - host: a\n    port: ssh\n", "line 3: 'port' is 'ssh', not a whole number"),
        ("hosts:\n  - host: a\n    port: 70000\n", "line 3: 'port' is 70000"),
        ("slots: 0\nhosts: [a]\n", "line 1: 'slots' is 0, not at least 1"),
        ("hosts:\n  - a\n  - b\n  - a\n", "line 4: a:22 is listed twice (also line 2)"),
        ("hosts:\n  - port: 22\n", "line 2: host 1 has no 'host' field"),
        ("user: me\n", "there is no 'hosts' list"),
        ("hosts: []\n", "'hosts' must be a non-empty list"),
        ("hosts: [a\n", "not valid YAML"),
        ("size: Standard_ND96is_H100_v5\nhosts: [a]\n", "line 1: 'size'"),
        ("accelerator: tpu\nhosts: [a]\n", "'accelerator' is 'tpu'"),
    ],
)
def test_yaml_errors_name_the_file_line_and_field(text, message):
    with pytest.raises(
        HostsFileError, match=message.replace("(", r"\(").replace(")", r"\)")
    ) as caught:
        parse(text)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a slots=8\nb cores=8\n", "hostfile, line 2: 'cores=8' is not slots=N"),
        ("a slots=x\n", "hostfile, line 1: 'slots' is 'x'"),
        ("a slots=0\n", "not a whole number of at least 1"),
        ("a\na\n", "hostfile, line 2: a is listed twice (also line 1)"),
        ("# only a comment\n", "no hosts in the file"),
    ],
)
def test_mpi_hostfile_errors_name_the_line(text, message):
    with pytest.raises(HostsFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_hosts_file(text, "hostfile", DEFAULTS)


@pytest.mark.parametrize("host", ["10.0.0.4:2222", "gpu-a:22", "[fe80::1]:2222"])
def test_an_mpi_line_with_a_port_is_refused_with_the_syntax_named(host):
    with pytest.raises(HostsFileError, match="gives a port, and an MPI hostfile line") as caught:
        parse_hosts_file(f"{host} slots=1\n", "hosts.txt", DEFAULTS)
    assert "line 1" in caught.value.message and "Port N" in caught.value.message


def test_hosts_files_as_editors_save_them(tmp_path):
    """A UTF-8 byte-order mark is not part of the first host; UTF-16 and binary files are
    refused with exit 2, saying what they are."""
    from typer.testing import CliRunner

    from runner.cli.app import app

    def dry_run(path):
        return CliRunner().invoke(app, ["run", "--dry-run", "--hosts", str(path), "--", "true"])

    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf127.0.0.2 slots=1\n")
    done = dry_run(bom)
    assert done.exit_code == 0, done.output
    assert "MASTER_ADDR=127.0.0.2\n" in done.stdout and "\ufeff" not in done.stdout
    utf16 = tmp_path / "u16.txt"
    utf16.write_text("127.0.0.2 slots=1\n", encoding="utf-16")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"h\x00\x00\xff\xfe")
    for path, said in ((utf16, "(the file is UTF-16)"), (binary, "byte 3 is b'\\xff'")):
        done = dry_run(path)
        assert done.exit_code == 2, done.output
        assert f"the hosts file {path} is not UTF-8 text" in done.stderr and said in done.stderr
        assert "Traceback" not in done.output
