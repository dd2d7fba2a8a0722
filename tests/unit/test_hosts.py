"""Hosts files: YAML and MPI hostfiles -> Inventory; errors name the file, line and field."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from dtrun.engines.ssh.endpoint import jump_endpoint
from dtrun.engines.ssh.hostlines import HostsFileError, is_host_list
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file, parse_hosts_value
from dtrun.errors import UsageError
from dtrun.spec.cluster import Accelerator

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


def test_a_text_field_is_taken_as_written_not_as_yaml_1_1_reads_it():
    inventory = parse("user: 0123\ninterface: on\nhosts: [a]\n")
    assert inventory.ssh is not None and inventory.ssh.user == "0123"  # not octal 83
    assert inventory.interface == "on"  # not True


@pytest.mark.parametrize(
    "line", ["workdir: 1e3", "workdir: dtrun-work", "python: venv/bin", "shared: ~/shared"]
)
def test_a_node_directory_that_is_not_a_full_path_is_refused_naming_its_line(line):
    """The nodes' scripts quote it: a relative path would be taken from wherever a script runs
    (the login's home, a launch directory), and `~` would stay a `~`."""
    from dtrun.engines.ssh.hostlines import HostsFileError

    with pytest.raises(HostsFileError) as caught:
        parse(f"hosts: [a]\n{line}\n")
    said = str(caught.value)
    assert "line 2" in said and "is not an absolute path" in said, said
    assert caught.value.exit_code == 2


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
        # a ':' splits PYTHONPATH (the code directory and the step hook's are under these)
        ("workdir: /tmp/a:b\nhosts: [a]\n", "line 1: 'workdir' '/tmp/a:b' holds ':'"),
        ("hosts: [a]\nshared: /nfs:x\n", "line 2: 'shared' '/nfs:x' holds ':'"),
        ("python: /opt/v:env/bin\nhosts: [a]\n", "line 1: 'python' '/opt/v:env/bin' holds ':'"),
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
        # the last one was taken, silently: 8 processes where the line also says 4
        ("a slots=4 slots=8\n", "hostfile, line 1: 'slots' is given twice on the line"),
        ("a max_slots=4 max_slots=8\n", "line 1: 'max_slots' is given twice"),
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

    from dtrun.cli.app import app

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


def hosts_of(text: str, source: str = "hostfile") -> list[tuple[str, int]]:
    return [(n.address, n.slots) for n in parse_hosts_file(text, source, DEFAULTS).nodes]


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        pytest.param(  # OpenMPI's hostfile (mpirun(1), "Specifying Host Nodes")
            "node1 slots=4 max_slots=8\nnode2 slots=4\n",
            [("node1", 4), ("node2", 4)],
            id="openmpi",
        ),
        pytest.param(  # mpirun(1): with max_slots alone, slots default to the limit
            "aa slots=4 max_slots=4\nbb max_slots=4\ncc slots=4\n",
            [("aa", 4), ("bb", 4), ("cc", 4)],
            id="openmpi-max-slots",
        ),
        pytest.param(  # DeepSpeed's hostfile ("Resource Configuration (multi-node)")
            "worker-1 slots=4\nworker-2 slots=4\n",
            [("worker-1", 4), ("worker-2", 4)],
            id="deepspeed",
        ),
        pytest.param(  # Volcano Engine / BytePlus MLP's $MLP_MPI_HOSTFILE, its documented line
            "172.22.128.95 slots=2\n172.22.128.96 slots=2\n",
            [("172.22.128.95", 2), ("172.22.128.96", 2)],
            id="volcano-mlp-mpi-hostfile",
        ),
        pytest.param(  # Horovod's -H, Volcano's $MLP_MPI_HOSTS, OpenMPI's --host
            "server1:4,server2:4\n",
            [("server1", 4), ("server2", 4)],
            id="horovod-list",
        ),
        pytest.param(
            "# the cluster\nh1:4, h2:4,\nh3:2  # a comma ends line 2: the list goes on\n",
            [("h1", 4), ("h2", 4), ("h3", 2)],
            id="list-across-lines",
        ),
        pytest.param(  # OpenMPI --host: a host without :N has one slot
            "h1\nh2:2\n",
            [("h1", 1), ("h2", 2)],
            id="list-with-a-lone-host",
        ),
        pytest.param(
            "# nodes\r\n\r\nnode1  \r\n\t node2\t# the second\r\n   \r\n",
            [("node1", 1), ("node2", 1)],
            id="plain-list-crlf-comments-blanks-trailing-spaces",
        ),
        pytest.param(  # a bare IPv6 address is not HOST:PORT; brackets are dropped
            "fe80::1 slots=2\n[fe80::2] slots=4\n2001:db8::7\n",
            [("fe80::1", 2), ("fe80::2", 4), ("2001:db8::7", 1)],
            id="ipv6-mpi-lines",
        ),
        pytest.param(  # in a list, [v6]:N is slots; a bare address has none to give
            "[fe80::1]:4,fe80::2\n",
            [("fe80::1", 4), ("fe80::2", 1)],
            id="ipv6-list",
        ),
        pytest.param(  # a link-local address with its zone, an interface's name or index
            "fe80::1%eth0 slots=2\n[fe80::2%3] slots=1\n",
            [("fe80::1%eth0", 2), ("fe80::2%3", 1)],
            id="ipv6-zones",
        ),
    ],
)
def test_hosts_files_as_each_ecosystem_writes_them(text, hosts):
    assert hosts_of(text) == hosts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a slots=2\nb:4,c:4\n",
            "hostfile, line 2: 'b:4,c:4' is a host:slots list (HOST:SLOTS,HOST:SLOTS), and "
            "line 1 is an MPI hostfile line (HOST slots=N): a file holds one shape",
        ),
        (
            "# comment\nlone\nb:4\na slots=2\n",
            "hostfile, line 4: 'a slots=2' is an MPI hostfile line (HOST slots=N), and line 3 "
            "is a host:slots list",
        ),
        ("h1:4,,h2:4\n", "hostfile, line 1: an empty item between two commas"),
        ("h1:4\nh2:0\n", "hostfile, line 2: 'h2:0': the slots after ':' are '0', not a whole"),
        ("h1:x,h2\n", "hostfile, line 1: 'h1:x': the slots after ':' are 'x'"),
        ("h1:4\nh2:4,h1:2\n", "hostfile, line 2: h1 is listed twice (also line 1)"),
        ("user@h1:4,h2\n", "hostfile, line 1: 'user@h1' is not a host name or address"),
        ("[fe80::1:4,h2\n", "hostfile, line 1: '[fe80::1:4' is not an IPv6 address in brackets"),
        ("[h1]:4,h2\n", "hostfile, line 1: '[h1]' is not an IPv6 address in brackets"),
        ("fe80::zz,h2\n", "hostfile, line 1: 'fe80::zz' is not a host name or address"),
        ("[fe80::1]x slots=1\n", "hostfile, line 1: '[fe80::1]x' is not an IPv6 address"),
    ],
)
def test_line_shape_errors_name_the_line(text, message):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts_file(text, "hostfile", DEFAULTS)
    assert message in caught.value.message
    assert caught.value.exit_code == 2


def test_a_list_colon_is_slots_so_h1_22_is_22_processes_not_ssh():
    assert hosts_of("h1:22\n") == [("h1", 22)]  # a 22-process host exists; documented


@pytest.mark.parametrize("text", ["h1:2222\n", "h0,h1:65\n"])
def test_a_slot_count_that_reads_like_a_port_is_refused_saying_so(text):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts_file(text, "hostfile", DEFAULTS)
    assert "hostfile, line 1:" in caught.value.message
    assert "slots: in a host:slots list `:N` is processes on the host, at most 64" in str(
        caught.value
    )
    assert "if you meant a port, give it in ~/.ssh/config" in caught.value.fix


@pytest.mark.parametrize(
    ("value", "is_list"),
    [
        ("h1:4,h2:4", True),
        ("worker-0:2, worker-1:2", True),
        ("10.0.0.4:8", True),
        ("[fe80::1]:4", True),
        ("h1,h2", True),  # OpenMPI --host h1,h2: one slot each
        ("gpu0", False),  # a lone word is a file name (that may not exist)
        ("hosts.yaml", False),
        ("fe80::1", False),  # a bare IPv6 address says no slots: not told from a name
        ("h1:x", False),
        ("./h1:4", False),  # a / is a path
        ("conf/h1:4,h2:4", False),
    ],
)
def test_hosts_given_on_the_command_line_are_told_from_a_file_name(value, is_list):
    assert is_host_list(value) is is_list


def test_hosts_given_on_the_command_line_as_mlp_mpi_hosts_or_horovod_h():
    inventory = parse_hosts_value("worker-0:2,worker-1:2", DEFAULTS)
    assert [(n.name, n.address, n.slots) for n in inventory.nodes] == [
        ("node-0", "worker-0", 2),
        ("node-1", "worker-1", 2),
    ]
    assert inventory.source == "hosts:worker-0:2,worker-1:2"
    assert [(n.address, n.slots) for n in parse_hosts_value("10.0.0.4:8", DEFAULTS).nodes] == [
        ("10.0.0.4", 8)
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("h1:4,h2:x", "--hosts value, item 2: 'h2:x': the slots after ':' are 'x'"),
        ("h1:4,,h2:4", "--hosts value, item 2: empty (two commas in a row)"),
        ("h1:4,h2:4,h1:4", "--hosts value, item 3: h1 is listed twice (also item 1)"),
        ("h1:4,h2:2222", "--hosts value, item 2: 'h2:2222' gives 2222 slots"),
        ("h1:4,a b:4", "--hosts value, item 2: 'a b' is not a host name or address"),
    ],
)
def test_hosts_given_on_the_command_line_name_the_item_in_errors(value, message):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts_value(value, DEFAULTS)
    assert message in caught.value.message


def test_bench_dry_run_on_hosts_given_as_horovod_h_needs_no_sshd(tmp_path, monkeypatch):
    """`dtrun bench --hosts "$MLP_MPI_HOSTS" --dry-run`: the hosts themselves, no file; a file
    of that name would win; a lone word that is no file is still a missing hosts file."""
    from typer.testing import CliRunner

    from dtrun.cli.app import app

    monkeypatch.chdir(tmp_path)

    def dry_run(hosts):
        args = ["bench", "--dry-run", "--nodes", "2", "--hosts", hosts, "--output", "runs"]
        return CliRunner().invoke(app, args)

    done = dry_run("127.0.0.2:2,127.0.0.3:2")
    assert done.exit_code == 0, done.output
    assert "node-0.sh on node-0 (127.0.0.2)" in done.stdout
    assert "node-1.sh on node-1 (127.0.0.3)" in done.stdout
    (tmp_path / "127.0.0.2:2,127.0.0.3:2").write_text("127.0.0.4\n127.0.0.5\n")
    done = dry_run("127.0.0.2:2,127.0.0.3:2")
    assert done.exit_code == 0, done.output
    assert "node-0.sh on node-0 (127.0.0.4)" in done.stdout
    refused = dry_run("127.0.0.2:2,127.0.0.3:2222")
    assert refused.exit_code == 2
    assert "--hosts value, item 2: '127.0.0.3:2222' gives 2222 slots" in refused.stderr
    assert "if you meant a port" in refused.stderr and "Traceback" not in refused.output
    missing = dry_run("gpu0")
    assert missing.exit_code == 2
    assert "cannot read the hosts file gpu0: No such file or directory" in missing.stderr
    assert "or the hosts themselves as HOST:SLOTS items" in missing.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # str.isdigit() holds for '²', which int() refuses: a ValueError and a traceback
        ("a slots=\u00b2\n", "hostfile, line 1: 'slots' is '\u00b2', not a whole number"),
        ("a slots=\u0663\n", "hostfile, line 1: 'slots' is '\u0663', not a whole number"),
        ("a:\u00b2,b:1\n", "hostfile, line 1: 'a:\u00b2': the slots after ':' are '\u00b2'"),
    ],
)
def test_slots_are_ascii_digits_and_others_are_refused_as_bad_input(text, message):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts_file(text, "hostfile", DEFAULTS)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # cpus reached the nodes as OMP_NUM_THREADS=100000000000
        ("cpus: 100000000000\nhosts: [a]\n", "line 1: 'cpus' is 100000000000, more than 8,192"),
        ("hosts: [{host: a, slots: 5000}]\n", "line 1: 'slots' is 5000, more than 1,024"),
        ("a slots=999999999999999999999\n", "line 1: 'slots' is 999999999999999999999, more"),
        # int() refuses 4,300+ digits with a ValueError YAML passes on: a traceback
        ("hosts: [{host: a, slots: " + "9" * 5000 + "}]\n", "'slots' is '99999999999999"),
        ("port: " + "9" * 4301 + "\nhosts: [a]\n", "line 1: 'port' is '9999999999"),
        ("slots: 2001-13-45\nhosts: [a]\n", "line 1: 'slots' is '2001-13-45', not a whole"),
        ("a slots=" + "9" * 5000 + "\n", "line 1: 'slots' is a number of 5,000 digits"),
        ("a:1,b:" + "9" * 5000 + "\n", "line 1: the slots of 'b' are a number of 5,000 digits"),
        # a host name of a list is held to a line's 253 characters: it was taken whole
        ("a:1," + "b" * 254 + ":1\n", "line 1: the host is 254 characters long; a host name"),
    ],
)
def test_a_hosts_files_counts_have_a_ceiling(text, message):
    with pytest.raises(HostsFileError) as caught:
        parse_hosts_file(text, "hosts", DEFAULTS)
    assert message in caught.value.message


def test_a_name_yaml_would_read_as_an_impossible_date_is_taken_as_written():
    """YAML 1.1 reads 2001-13-45 as a date, and its month 13 was a ValueError: a traceback."""
    inventory = parse_hosts_file("user: 2001-12-45\nhosts: [2001-13-45]\n", "hosts", DEFAULTS)
    assert [node.address for node in inventory.nodes] == ["2001-13-45"]
    assert inventory.ssh is not None and inventory.ssh.user == "2001-12-45"


def test_a_hosts_file_that_never_ends_is_refused_after_its_first_megabytes(tmp_path):
    """/dev/zero (or a 1 GB file) was read whole: a MemoryError, or all of this machine's."""
    from dtrun.engines.inputs import MAX_TEXT_BYTES, read_text
    from dtrun.errors import InventoryError

    with pytest.raises(InventoryError) as caught:
        read_text(Path("/dev/zero"), "hosts file")
    assert f"more than any hosts file ({MAX_TEXT_BYTES:,} bytes)" in caught.value.message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(("what", "lines"), [("hosts file", True), ("outputs file", False)])
def test_a_file_that_is_not_utf8_is_refused_with_advice_for_what_it_is(tmp_path, what, lines):
    """--outputs FILE in UTF-16 was told to be saved "one host per line", a hosts file's shape."""
    from dtrun.engines.inputs import read_text
    from dtrun.errors import InventoryError

    path = tmp_path / "f"
    path.write_bytes("{}".encode("utf-16"))
    with pytest.raises(InventoryError) as caught:
        read_text(path, what)
    assert caught.value.message.startswith(f"the {what} {path} is not UTF-8 text")
    assert ("one host per line" in str(caught.value.fix)) is lines


def test_a_named_pipe_nothing_writes_to_is_refused_not_waited_on(tmp_path):
    """open() of a FIFO waits for a writer: `--hosts FIFO` with none hung dtrun, silent."""
    import threading

    from dtrun.engines.inputs import read_text
    from dtrun.errors import InventoryError

    fifo = tmp_path / "hosts"
    os.mkfifo(fifo)
    caught: list[BaseException] = []

    def read() -> None:
        try:
            read_text(fifo, "hosts file")
        except InventoryError as exc:
            caught.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # the old read: a writer that opens and closes lets it go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
        pytest.fail("dtrun waited on a named pipe nothing writes to")
    assert len(caught) == 1 and isinstance(caught[0], InventoryError)
    assert caught[0].exit_code == 2
    assert "a pipe (FIFO) that nothing wrote to" in caught[0].message


def test_a_pipe_s_lines_are_read_to_its_end(tmp_path):
    """--hosts <(...): the shell's pipe, its writer there, is read as it is written."""
    from dtrun.engines.inputs import read_text

    read_end, write_end = os.pipe()
    os.write(write_end, b"a slots=1\n")
    os.close(write_end)
    try:
        assert read_text(Path(f"/dev/fd/{read_end}"), "hosts file") == "a slots=1\n"
    finally:
        os.close(read_end)


@pytest.mark.parametrize("name", ["eth0", "lo", "ib0", "enp0s31f6", "bond0.100", "e" * 15, "é" * 7])
def test_an_interface_linux_would_name_is_taken(name):
    assert parse(f"hosts: [a]\ninterface: '{name}'\n").interface == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "e" * 16, "é" * 8, "a/b", "eth0:1", "eth 0", "-x", "^lo", "=eth0", "eth0,ib0"],
)
def test_an_interface_linux_would_refuse_is_refused_with_the_line(name):
    with pytest.raises(HostsFileError, match=r"hosts\.yaml, line 2: 'interface'"):
        parse(f"hosts: [a]\ninterface: '{name}'\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("key: ~no-such-user-here/id_ed25519\nhosts: [a]\n", "line 1: 'key' is '~no-such-user"),
        ("hosts: [a]\nknown_hosts: ~no-such-user-here/kh\n", "line 2: 'known_hosts' is '~no-"),
        ("hosts:\n  - host: a\n    key: ~no-such-user-here/k\n", "line 3: 'key' is '~no-such-"),
    ],
)
def test_a_path_under_the_home_of_no_user_here_is_refused_naming_its_line(text, message):
    with pytest.raises(HostsFileError, match=message) as caught:
        parse(text)
    assert caught.value.exit_code == 2
    assert "give the full path" in str(caught.value.fix)


@pytest.mark.parametrize("field", ["key", "known_hosts"])
@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "sparse"])
def test_a_key_or_known_hosts_that_is_no_file_or_huge_is_refused_before_it_is_read(
    tmp_path, field, kind
):
    """asyncssh reads these whole: a FIFO hung dtrun for good, /dev/zero filled the memory."""
    path = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        with path.open("wb") as sparse:
            sparse.truncate(2 * 1024**3)
    with pytest.raises(HostsFileError, match=f"line 1: '{field}' '{path}' is ") as caught:
        parse(f"{field}: {path}\nhosts: [a]\n")
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("port", ["0", "65536", "99999", "²", "٢٢", "9" * 5000])
def test_a_jump_hosts_port_outside_1_to_65535_or_not_ascii_digits_is_refused(port):
    """'²' is a digit to str.isdigit but not to int(): a traceback; 99999 reached the resolver,
    'Name or service not known' on every node (exit 1). A ProxyJump of ~/.ssh/config too."""
    with pytest.raises(HostsFileError, match=r"line 1: 'jump' is not \[USER@\]HOST\[:PORT\]"):
        parse(f"jump: 'admin@bastion:{port}'\nhosts: [a]\n")
    with pytest.raises(UsageError, match="cannot read the jump host") as caught:
        jump_endpoint(f"admin@bastion:{port}", None, None, None)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("workdir", "shown"),
    [("/", "/"), ("//", "/"), ("/./", "/"), ("/etc", "/etc"), ("/usr/", "/usr"),
     ("/usr/local", "/usr/local"), ("/var", "/var"), ("/tmp/../etc", "/etc")],
)  # fmt: skip
def test_a_workdir_that_is_a_system_folder_is_refused_naming_it(workdir, shown):
    """dtrun writes code/ and runs/ straight into the workdir: /etc would get /etc/code."""
    with pytest.raises(HostsFileError) as caught:
        parse(f"hosts: [a]\nworkdir: {workdir}\n")
    said = caught.value.message
    assert f"line 2: 'workdir' '{workdir}' is {shown}, a folder of the system" in said, said
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("shared", "shown"),
    [("/", "/"), ("/etc", "/etc"), ("/usr/share", "/usr/share"), ("/shared/../var", "/var")],
)
def test_a_shared_folder_that_is_a_system_folder_is_refused_naming_it(shared, shown):
    """dtrun writes its .dtrun/ folder into the shared one: `shared: /` would get /.dtrun."""
    with pytest.raises(HostsFileError) as caught:
        parse(f"hosts: [a]\nshared: {shared}\n")
    said = caught.value.message
    assert f"line 2: 'shared' '{shared}' is {shown}, a folder of the system" in said, said
    assert "writes its .dtrun/ folder into the shared folder" in said
    assert caught.value.exit_code == 2


def test_a_refused_shared_folder_is_not_told_to_be_a_folder_only_one_host_has():
    """/tmp/dtrun, right for a workdir, is each host's own: a shared folder is one every host
    mounts."""
    with pytest.raises(HostsFileError) as caught:
        parse("hosts: [a]\nshared: /etc\n")
    said = caught.value.message
    assert "/tmp" not in said, said
    assert "a folder every host mounts, such as /shared/dtrun" in said


@pytest.mark.parametrize("shared", ["/shared", "/home/alice", "/usr/local/shared", "/mnt/nfs"])
def test_a_shared_folder_of_its_own_is_taken(shared):
    assert parse(f"hosts: [a]\nshared: {shared}\n").shared_dir == shared


@pytest.mark.parametrize("workdir", ["'/  '", "'/ tmp/dtrun'", "'/tmp/dtrun '"])
def test_a_workdir_with_a_folder_name_edged_by_white_space_is_refused(workdir):
    with pytest.raises(HostsFileError) as caught:
        parse(f"hosts: [a]\nworkdir: {workdir}\n")
    assert "starts or ends with white space" in caught.value.message


@pytest.mark.parametrize("workdir", ["/tmp", "/var/tmp/dtrun", "/scratch", "/usr/local/dtrun"])
def test_a_workdir_of_its_own_below_or_beside_system_folders_is_taken(workdir):
    inventory = parse(f"hosts: [a]\nworkdir: {workdir}\n")
    assert inventory.ssh is not None and inventory.ssh.workdir == workdir


@pytest.mark.parametrize(
    ("entry", "kind"),
    [("[true]", "a true/false value"), ("[a, 1.5]", "a number"), ("[10:20]", "a number"),
     ("[2001-01-01]", "a date"), ("\n  - host: off", "a true/false value"),
     ("\n  - host: a\n    address: 12", "a number")],
)  # fmt: skip
def test_a_host_yaml_reads_as_a_boolean_number_or_date_is_refused_naming_it(entry, kind):
    """`hosts: [true]` became the host 'true' and `[1.5]` the host '1.5' (ssh: 1.0.0.5)."""
    with pytest.raises(HostsFileError) as caught:
        parse(f"hosts: {entry}\n")
    said = caught.value.message
    assert f"is {kind} to YAML, not a host name" in said and "quote it" in said, said
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("hosts: [!!python/object:os.system a]\n", 1, "host"),
        ("hosts: [a]\nuser: !!python/name:os.system x\n", 2, "user"),
        ("hosts: [a]\nslots: !custom 4\n", 2, "slots"),
        ("hosts:\n  - host: a\n    port: !<%1b[2J> 22\n", 3, "port"),
    ],
)
def test_a_yaml_tag_dtrun_has_no_type_for_is_refused_naming_line_and_field(text, line, field):
    """The safe loader's ConstructorError for an unknown tag was a traceback, exit 1."""
    with pytest.raises(HostsFileError) as caught:
        parse(text)
    said = caught.value.message
    assert said.startswith(f"hosts.yaml, line {line}: '{field}' is tagged "), said
    assert "a YAML type dtrun does not read" in said and "\x1b" not in said
    assert caught.value.exit_code == 2


def test_a_quoted_host_that_yaml_would_read_as_a_number_is_taken_as_written():
    inventory = parse("hosts: ['1_000', \"true\"]\n")  # YAML 1.1: 1_000 is 1000
    assert [node.ssh_host for node in inventory.nodes] == ["1_000", "true"]


@pytest.mark.parametrize(
    "host", ["10.0.0.010", "127.0.0.01", "127.1", "1.5", "2130706433", "0x7f.0.0.1", "1.2.3.4.5"]
)
def test_a_host_of_numbers_only_that_is_no_plain_ipv4_address_is_refused(host):
    """The C library reads these as IPv4 addresses its own way: 10.0.0.010 reached 10.0.0.8
    (octal), and 127.0.0.1 with 127.0.0.01 was one machine listed as two nodes."""
    with pytest.raises(HostsFileError, match=r"line 1: the host .* is numbers only") as caught:
        hosts_of(f"{host} slots=1\n")
    assert caught.value.exit_code == 2
    with pytest.raises(HostsFileError, match=r"line 2: 'host' .* is numbers only"):
        parse(f"hosts:\n  - '{host}'\n")


@pytest.mark.parametrize(
    "host", ["10.0.0.10", "255.255.255.255", "node001", "1.example", "0xbad.cafe"]
)
def test_a_host_with_a_letter_or_a_plain_ipv4_address_is_taken(host):
    assert hosts_of(f"{host} slots=1\n") == [(host, 1)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a host name is case-insensitive (RFC 4343) and a trailing dot names the same host:
        # each pair is one machine, checked or run as two nodes that share it
        ("hosts:\n  - node-a\n  - NODE-A\n", "line 3: NODE-A:22 is listed twice (also line 2)"),
        ("hosts:\n  - node-a\n  - node-a.\n", "line 3: node-a.:22 is listed twice (also line 2)"),
        ("hosts:\n  - '::1'\n  - '0::1'\n", "line 3: 0::1:22 is listed twice (also line 2)"),
    ],
)
def test_a_host_under_two_spellings_is_refused_as_listed_twice(text, message):
    with pytest.raises(HostsFileError, match=re.escape(message)) as caught:
        parse(text)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("text", ["a\nA\n", "a\na.\n", "h1:2,H1:2\n"])
def test_an_mpi_hostfile_or_list_with_a_host_under_two_spellings_is_refused(text):
    with pytest.raises(HostsFileError, match="is listed twice"):
        parse_hosts_file(text, "hostfile", DEFAULTS)
