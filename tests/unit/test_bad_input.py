"""Bad input, across every command: each gives exit 2 with one message saying what is wrong and
what to do, no traceback, and creates or changes nothing (docs/bench.md, "Exit codes").

One table per kind of input: command-line values, hosts files, stack outputs files, stack
settings. Damaged run directories for `report` and `compare` have their own table in
tests/unit/test_damaged.py (39 cases). Every case runs the real command (Typer's runner, in
process) in an empty working directory, with --output inside it; the directory must hold the same
files, byte for byte, afterwards.
"""

from __future__ import annotations

import datetime
import hashlib
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dtrun.azure.catalog import CatalogError
from dtrun.azure.config import cluster_spec
from dtrun.azure.settingcheck import ConfigError
from dtrun.cli.app import app
from dtrun.cli.common import ERROR_LINE_MOST

# (command line, words the message must hold). Each names what is wrong; `dtrun` is implied.
CLI = [
    ("bench --nodes 0", "--nodes needs node counts of at least 1"),
    ("bench --nodes two", "'two' is not a whole number"),
    ("bench --nodes -1", "got -1"),
    ("bench --nodes 2," + "9" * 5000, "at most 10,000: got a number of 5,000 digits"),
    ("bench --nodes 2," + "9" * 30, "got 99999999999999999999... (30 digits)"),
    ("bench --nodes 0,1,20000,-3,0,-5", "got -5, -3, 0, ..."),
    ("bench --nodes 1_0", "'1_0' is not a whole number"),
    ("bench --nodes 2,+-" + "9" * 5000, "is not a whole number"),
    ("bench --nodes 1,,2", "it has an empty entry"),
    ("bench --nodes ''", "it has an empty entry"),
    ("bench --nodes 100", "cannot simulate 100 nodes"),
    ("bench --steps 0", "--steps must be at least 1"),
    ("bench --steps -5", "--steps must be at least 1"),
    ("bench --steps 1.5", "'1.5' is not a whole number"),
    ("bench --steps abc", "'abc' is not a whole number"),
    ("bench --warmup -1", "--warmup must be at least 0"),
    ("bench --warmup 100 --steps 10", "no step would be timed"),
    ("bench --repeat 0", "--repeat must be at least 1"),
    ("bench --price-per-node-hour 0", "--price-per-node-hour 0 is not a price"),
    ("bench --price-per-node-hour nan", "--price-per-node-hour nan is not a price"),
    ("bench --max-cost -3", "--max-cost -3 is not a price"),
    ("bench --max-cost 5", "--max-cost 5 needs a price"),
    ("bench --max-cost 1 --price-per-node-hour 10", "estimated cost $16.00 is above --max-cost 1"),
    ("bench --mode sideways", "'sideways' is not one of"),
    ("bench --workload nonsense", "unknown workload 'nonsense'"),
    ("bench --batch 0", "--batch must be at least 1"),
    ("bench --batch -3", "--batch must be at least 1"),
    ("bench --global-batch 8", "the mode is weak"),
    ("bench --mode strong --global-batch 0", "--global-batch must be at least 1"),
    ("bench --mode strong --nodes 1,3 --global-batch 8", "cannot split a global batch of 8"),
    ("bench --timeout nan", "--timeout must be a number of seconds above 0"),
    ("bench --timeout inf", "--timeout must be a number of seconds above 0"),
    ("bench --timeout 0", "--timeout must be a number of seconds above 0"),
    ("bench --timeout -1", "--timeout must be a number of seconds above 0"),
    ("bench --timeout soon", "'soon' is not a number"),
    ("bench --procs-per-node 0", "--procs-per-node must be at least 1"),
    ("bench --launcher torchrunx", "did you mean 'torchrun'?"),
    ("bench --env FOO", "--env 'FOO' is not KEY=VALUE"),
    ("bench --env =x", "--env '=x' is not KEY=VALUE"),
    ("bench --env 1X=2", "--env '1X' is not a valid variable name"),
    ("bench --env 'A B=2'", "--env 'A B' is not a valid variable name"),
    ("bench --port 0", "--port must be at least 1 and at most 65,534"),
    ("bench --port 70000", "--port must be at least 1 and at most 65,534"),
    ("bench --port 65535", "--port must be at least 1 and at most 65,534"),
    ("bench --port http", "'http' is not a whole number"),
    ("bench --rendezvous etcd", "'etcd' is not one of"),
    ("bench --zero-stage 4", "--zero-stage must be 1, 2 or 3"),
    ("bench --horovod-controller tcp", "'tcp' is not one of"),
    ("bench --launcher tensorflow --tf-ps 0", "--tf-ps must be at least 1"),
    ("bench --tf-strategy mirrored", "'mirrored' is not one of"),
    ("bench --run-id a/b", "--run-id 'a/b' cannot name a run directory"),
    ("bench --run-id ..", "--run-id '..' cannot name a run directory"),
    ("bench --run-id ''", "--run-id '' cannot name a run directory"),
    # a token's shape: every record would hold <redacted>, unreadable, after the whole sweep
    ("bench --run-id ghp_" + "Zq9vXw7LmN3pRt" * 2, "--run-id holds a secret"),
    ("run --run-id hf_" + "Zq9vXw7LmN3pRt" * 2 + " -- python x.py", "--run-id holds a secret"),
    ("bench --run-id " + "r" * 300, "--run-id is 300 bytes long"),
    # measured in bytes, as a file system does: 90 characters, 270 bytes
    ("bench --run-id " + "日" * 90, "--run-id is 270 bytes long (90 characters)"),
    ("run --run-id " + "é" * 60 + " -- python x.py", "--run-id is 120 bytes long (60 characters)"),
    ("bench --results ftp://bucket/x", "names a store dtrun cannot write"),
    ("bench --results s3://", "names no bucket"),
    ("bench --results my-bucket", "is not a store URL: it names no scheme"),
    ("bench --hosts missing.yaml", "cannot read the hosts file missing.yaml"),
    ("bench --hosts .", "cannot read the hosts file ."),
    ("bench --hosts h1:99,h2:4", "--hosts value, item 1"),
    ("bench --hosts a:4,a:4", "--hosts value, item 2"),
    ("bench --hosts h1:0,h2", "--hosts value, item 1"),
    ("bench --stack 'bad name!'", "--stack 'bad name!' is not a stack name"),
    ("bench --outputs missing.json", "cannot read the outputs file missing.json"),
    ("bench --hosts a.yaml --stack x", "--hosts and --stack name two clusters"),
    ("bench --stack x --outputs a.json", "--stack and --outputs name two clusters"),
    ("bench --local-nodes 0", "--local-nodes must be at least 1"),
    ("bench --local-nodes 300", "cannot simulate 300 nodes"),
    ("bench --ready-timeout nan", "--ready-timeout must be a number of seconds above 0"),
    ("bench --ready-timeout -1", "--ready-timeout must be a number of seconds above 0"),
    ("bench --connect-timeout 0", "--connect-timeout must be a number of seconds above 0"),
    ("bench --partition gpu", "--partition shapes a Slurm allocation, and --slurm was not given"),
    ("run --nodelist n1 -- true", "--nodelist shapes a Slurm allocation"),
    ("exec --time 10 -- true", "--time shapes a Slurm allocation"),
    ("bench --drain-failing", "--drain-failing shapes a Slurm allocation"),
    ("bench --queue-timeout 5", "--queue-timeout shapes a Slurm allocation"),
    ("bench --slurm --queue-timeout 0", "--queue-timeout must be a number of seconds above 0"),
    ("bench --slurm --hosts h1:1", "--slurm runs on the nodes Slurm gives"),
    ("bench --connect-timeout inf", "--connect-timeout must be a number of seconds above 0"),
    ("bench --teardown", "--teardown destroys a Pulumi stack, and no --stack was given"),
    ("bench --project-tokens 0", "--project-tokens must be at least 1"),
    ("bench --target-efficiency 90", "--target-efficiency must be a fraction above 0"),
    ("bench --target-efficiency 0", "--target-efficiency must be a fraction above 0"),
    ("bench --target-efficiency nan", "--target-efficiency must be a fraction above 0"),
    ("bench --preset gigantic", "unknown preset 'gigantic'"),
    ("bench --layers 0", "--layers must be at least 1"),
    ("bench --d-model 30 --heads 4", "--d-model must be a multiple of --heads"),
    ("bench --heads 0", "--heads must be at least 1"),
    ("bench --seq-len 0", "--seq-len must be at least 1"),
    ("bench --vocab 0", "--vocab must be at least 1"),
    ("bench --strategy zerox", "did you mean 'zero3'?"),
    ("bench --strategy pipeline --schedule zigzag", "'zigzag' is not one of"),
    ("bench --strategy pipeline --micro-batches 0", "--micro-batches must be at least 1"),
    ("bench --strategy pipeline --pp-size 3 --nodes 2", "--pp-size 3 does not divide"),
    ("bench --stages-per-rank 0", "only apply to the pipeline strategy"),
    ("bench --strategy fsdp --stage-split balanced", "--stage-split only apply to the pipeline"),
    ("bench --strategy pipeline --stage-split lopsided", "'lopsided' is not one of"),
    ("bench --dtype float8", "'float8' is not one of"),
    ("bench --workload allreduce --sizes 1M:1K", "not above the second"),
    ("bench --workload allreduce --sizes 12Q", "'12Q' is not a size"),
    ("bench --workload allreduce --sizes 0", "holds no positive size"),
    ("predict --from x.json --nodes 8 --busbw 0", "--busbw must be above 0"),
    # it said "pick one of those for the vmSize setting", a stack's setting
    ("predict --from x.json --nodes 8 --size Standard_X1", "next: pick one of those for --size"),
    ("predict --from x.json --nodes 8 --busbw 1 --size Standard_ND96isr_H100_v5", "both say"),
    ("bench --workload allreduce --sizes 4K:99999999G", "'99999999G' is more than 256G"),
    ("bench --health-size 99999999999999G", "'99999999999999G' is more than 256G"),
    ("bench --workload allreduce --ar-dtype int3", "--ar-dtype 'int3' is not a type"),
    ("bench --workload allreduce --ar-iters 0", "--ar-iters must be at least 1"),
    ("bench --workload allreduce --ar-warmup -1", "--ar-warmup must be at least 0 and at most"),
    ("bench --health-threshold nan", "--health-threshold must be above 0 and at most 1,000,000"),
    ("bench --health-threshold -2", "--health-threshold must be above 0 and at most 1,000,000"),
    ("bench --health-size huge", "--health-size 'huge' is not one message size"),
    ("bench --bogus-flag", "No such option: --bogus-flag"),
    ("bench --samples-per-step 4", "--samples-per-step describes your program's steps"),
    ("bench --samples-per-step 4 -- python x.py", "and --mode weak keeps each process's batch"),
    ("bench --mode strong --tokens-per-step 4 --per-process -- python x.py", "keeps the global"),
    ("bench --step-pattern 'step (' -- python x.py", "is not a regular expression"),
    ("bench --step-pattern '(?P<seconds>.)(?P<ms>.)' -- python x.py", "both a `seconds` and"),
    ("bench --strategy fsdp -- python x.py", "your program trains its own way"),
    ("bench --tokens-per-step 8 --samples-per-step 8 -- python x.py", "two units for one"),
    ("run", "dtrun run needs a command to run"),
    ("run --nodes 0 -- python x.py", "--nodes must be at least 1"),
    ("run --timeout nan -- python x.py", "--timeout must be a number of seconds above 0"),
    ("run -- python -c 'print(1)'", "cannot tell what `python -c print(1)` runs"),
    ("run --launcher nope -- python x.py", "unknown launcher 'nope'"),
    ("run --procs-per-node -1 -- python x.py", "--procs-per-node must be at least 1"),
    ("run --env NOPE -- python x.py", "--env 'NOPE' is not KEY=VALUE"),
    ("run --run-id ../up -- python x.py", "cannot name a run directory"),
    # a byte that is not UTF-8 (Python's lone surrogate for it): no script or record holds it
    (
        "run -- python x.py a\udcffb",
        "the program's argument 1 is not UTF-8: byte 0xff at index 1",
    ),
    ("run -- ./\udcff.sh", "\\xff.sh' is not UTF-8"),
    ("run --env X=\udcfe -- python x.py", "--env X's value is not UTF-8: byte 0xfe at index 0"),
    ("bench -- python x.py 1 \udcff", "the program's argument 2 is not UTF-8"),
    ("exec -- echo \udcff", "the command's word 2 is not UTF-8"),
    ("exec", "no command to run"),
    # an empty shell line ran nothing on every node and exited 0, as if it had run
    ("exec -- ''", "no command to run"),
    ("exec -- ' '", "no command to run"),
    ("exec --nodes 9 -- true", "which is not a node of this cluster"),
    ("exec --nodes x -- true", "which is not a node of this cluster"),
    ("exec --hosts missing.yaml -- true", "cannot read the hosts file missing.yaml"),
    ("report missing-run", "is not a `dtrun bench` run directory: no such directory"),
    ("report .", "it holds no manifest.json"),
    ("compare missing-a missing-b", "is not a `dtrun bench` run directory"),
    # a name longer than a file system takes (256+ bytes a part): pathlib's is_dir() and
    # exists() raise ENAMETOOLONG where they answer False for a name not there
    ("report " + "r" * 300, "no directory can have a name this long"),
    ("compare " + "r" * 300 + " " + "s" * 300, "no directory can have a name this long"),
    ("predict " + "r" * 300 + " --nodes 8", "no directory can have a name this long"),
    ("bench --hosts " + "h" * 300, "cannot read the hosts file hhh"),
    ("bench --hosts a:" + "9" * 5000, "the slots of 'a' are a number of 5,000 digits"),
    ("sizes --region mars", "No such option: --region"),
    ("down --stack 'bad name!'", "is not a stack name"),
    ("outputs --stack 'bad name!'", "is not a stack name"),
    ("up --stack 'bad name!'", "is not a stack name"),
    ("up", "Missing option '--stack'"),
    ("nonsense", "No such command 'nonsense'"),
]

# Hosts files: (file name, content, words the message must hold, with the file:line).
HOSTS = [
    ("empty.yaml", "hosts: []\n", "empty.yaml, line 1: 'hosts' must be a non-empty list"),
    ("notlist.yaml", "hosts: a\n", "notlist.yaml, line 1: 'hosts' must be a non-empty list"),
    ("nohosts.yaml", "user: x\n", "there is no 'hosts' list"),
    ("typo.yaml", "hosts:\n  - host: a\n    prot: 22\n", "line 3: unknown field 'prot'"),
    ("dup.yaml", "hosts: [a, a]\n", "is listed twice"),
    ("size.yaml", "hosts: [a]\nsize: Standard_Fake\n", "line 2: 'size' 'Standard_Fake' is not"),
    ("port.yaml", "hosts: [a]\nport: 0\n", "line 2: 'port' is 0, not 1 to 65535"),
    ("portword.yaml", "hosts: [a]\nport: ssh\n", "line 2: 'port' is 'ssh', not a whole number"),
    ("slots.yaml", "hosts: [a]\nslots: 0\n", "line 2: 'slots' is 0, not at least 1"),
    ("broken.yaml", "hosts: [a\n", "broken.yaml, line 2: not valid YAML"),
    ("acc.yaml", "hosts: [a]\naccelerator: tpu\n", "line 2: 'accelerator' is 'tpu'"),
    ("user.yaml", "hosts: [a]\nuser: [x]\n", "line 2: 'user' must be a single value"),
    ("nohost.yaml", "hosts:\n  - port: 22\n", "line 2: host 1 has no 'host' field"),
    ("mpi.txt", "a slots=x\n", "mpi.txt, line 1: 'slots' is 'x'"),
    ("mpizero.txt", "a slots=0\n", "mpizero.txt, line 1: 'slots' is '0'"),
    ("mpiword.txt", "a cpus=4\n", "mpiword.txt, line 1: 'cpus=4' is not slots=N"),
    ("mpiport.txt", "a:22 slots=1\n", "line 1: 'a:22' gives a port"),
    ("mpidup.txt", "a slots=1\nb\na slots=2\n", "mpidup.txt, line 3: a is listed twice"),
    ("zero.txt", "", "zero.txt, line 1: no hosts in the file"),
    ("comments.txt", "# only comments\n", "comments.txt, line 1: no hosts in the file"),
    ("utf16.txt", "\ufeffnode-a slots=1\n".encode("utf-16"), "is not UTF-8 text"),
    ("latin1.txt", "n\xf6de slots=1\n".encode("latin-1"), "is not UTF-8 text"),
    ("binary.txt", b"\x00\x01\x02binary", "is not a text file"),
    ("nul.yaml", b"hosts: [a]\n\x00\n", "line 2 holds the control character"),
    ("longuser.yaml", f"user: {'u' * 10_000}\nhosts: [a]\n", "a login name has at most 255"),
    ("longhost.yaml", f"hosts: [{'h' * 254}]\n", "254 characters long; a host name has at most"),
    ("iface.yaml", "hosts: [a]\ninterface: 'eth0; touch x'\n", "line 2: 'interface' 'eth0; t"),
    ("longiface.yaml", "hosts: [a]\ninterface: enp0s31f6-bridge0\n", "line 2: 'interface' 'enp0s"),
    ("deep.yaml", "hosts: " + "[" * 50_000 + "]" * 50_000, "not valid YAML"),  # no recursion
    ("null.yaml", "interface:\nhosts: [a]\n", "line 1: 'interface' has no value"),
]

# Stack outputs files (--outputs): (file name, content, words the message must hold).
OUTPUTS = [
    ("null.json", "null", "null.json does not hold stack outputs: it holds a JSON null"),
    ("list.json", "[]", "list.json does not hold stack outputs: it holds a JSON list"),
    ("number.json", "7", "it holds a JSON int"),
    ("empty.json", "", "empty.json is not JSON"),
    ("trunc.json", "{", "trunc.json is not JSON"),
    ("noversion.json", "{}", "it has no 'version' field"),
    ("v99.json", '{"version": 99}', "made by a newer dtrun"),
    ("v0.json", '{"version": 0}', "holds stack outputs version 0"),
    ("noip.json", '{"version": 1}', "noip.json"),
    ("utf16.json", '{"version": 1}'.encode("utf-16"), "is not UTF-8 text"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "deep.json is not JSON"),  # no RecursionError
    # int() refuses 4,300+ digits with a ValueError json.loads passes on: a traceback
    ("digits.json", '{"version": 1, "x": ' + "9" * 5000 + "}", "a whole number of 5,000 digits"),
    ("twice.json", '{"version": 99, "version": 1}', "the key 'version' is given twice"),
]

# Stack settings (dtrun:* in Pulumi.<stack>.yaml), checked before Pulumi runs the program;
# `dtrun up` turns the same errors into exit 2. More cases: tests/unit/test_clusterconfig.py.
GOOD_SETTINGS = {"adminCidrs": ["203.0.113.4/32"]}  # the rest: Pulumi.yaml's defaults
TODAY = datetime.date(2026, 11, 23)  # the catalog's retirement dates are judged on this day
SETTINGS = [
    ({"vmSize": "Standard_D2s_v5"}, "Standard_D2s_v5"),
    ({"nodeCount": 0}, "a cluster of 0 nodes cannot be made"),
    ({"nodeCount": "many"}, "dtrun:nodeCount"),
    ({"adminCidrs": []}, "dtrun:adminCidrs is empty"),
    ({"adminCidrs": ["0.0.0.0/0"]}, "opens SSH to the whole internet"),
    ({"adminCidrs": ["10.0.0.5/24"]}, "did you mean 10.0.0.0/24"),
    ({"adminCidrs": ["my laptop"]}, "is not a CIDR"),
    ({"vnetCidr": "172.16.0.0/12"}, "overlaps 172.16.0.0/16"),
    ({"vnetCidr": "10.0.0.0/24"}, "needs four /24 subnets"),
    ({"storageKind": "s3"}, "use one of azurefiles, netapp, lustre"),
    ({"storageSizeGib": 50}, "100 to 102400 GiB"),
    ({"storageKind": "lustre", "storageSizeGib": 256 * 1024, "zone": "1"}, "at most 128 TiB"),
    ({"storageKind": "lustre", "storageSizeGib": 8192}, "dtrun:zone is empty"),
    ({"spotMaxPrice": "cheap"}, "dtrun:spotMaxPrice"),
    ({"adminUser": "root"}, "does not accept as a login"),
    ({"namePrefix": "Dtrun-Cluster"}, "2 to 12 lowercase letters"),
    ({"tags": ["team"]}, "not KEY=VALUE"),
    ({"image": "ubuntu-hpc"}, "is not an image URN"),
    ({"image": "almalinux:almalinux-hpc:8_10-hpc-gen2:latest"}, "not an Ubuntu image"),
    ({"vmsize": "Standard_ND96isr_H100_v5"}, "did you mean dtrun:vmSize"),
    ({"adminCidrs": "[" * 100_000}, "not an array"),  # as a stack file holds it: no recursion
]


def tree(root: Path) -> dict[str, str]:
    """Every file under root and its content's hash."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else "dir"
        for path in sorted(root.rglob("*"))
    }


def refused(args: list[str], where: Path, must_say: str) -> None:
    before = tree(where)
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, args)
    out = result.output
    # exit 2 through dtrun's own error printing or click's usage error; never an exception
    assert isinstance(result.exception, SystemExit), f"{args}: {result.exception!r}\n{out}"
    assert result.exit_code == 2, f"{args}: exit {result.exit_code}\n{out}"
    assert "Traceback" not in out
    flat = " ".join(out.replace("│", " ").split())
    assert must_say in flat, f"{args}: {must_say!r} not in\n{out}"
    # a value quoted back is cut to the line's start and end, whatever its size
    assert max(map(len, out.splitlines())) <= ERROR_LINE_MOST + 100, f"{args}: a long line"
    # one message, saying what to do: dtrun's `next:` line or click's pointer to --help
    ours, clicks = flat.count("error:"), flat.count("Error")
    assert (ours, clicks) in ((1, 0), (0, 1)), f"{args}: not one message\n{out}"
    if ours:
        # a `next:` line: --zero-stage 4 and --warmup 100 --steps 10 gave only the rule
        assert "next: " in flat, f"{args}: says not what to do\n{out}"
    else:
        assert "--help' for help" in flat
    assert tree(where) == before, f"{args} changed the working directory"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("line", "must_say"), CLI, ids=[line[:60] for line, _ in CLI])
def test_a_bad_command_line_value(workdir, line, must_say):
    args = shlex.split(line)
    if args[0] in ("bench", "run"):  # never the user's runs/: an --output of the test's own
        args[1:1] = ["--output", str(workdir / "runs"), "--dry-run"]
    refused(args, workdir, must_say)


@pytest.mark.parametrize(
    ("value", "must_say"),
    [("1e-320", "1e-320 is not a price: an amount of US dollars at least 0.0001"),
     ("0.00009", "0.00009 is not a price: an amount of US dollars at least 0.0001"),
     ("1_000", "1_000 is not a price: an amount is ASCII digits"),
     ("\u0661\u0660", "is not a price: an amount is ASCII digits"),
     (" 5", "5 is not a price: an amount is ASCII digits"),
     ("+5", "+5 is not a price: an amount is ASCII digits")],
)  # fmt: skip
@pytest.mark.parametrize("command", ["bench", "predict"])
def test_a_price_that_is_no_plain_amount_or_under_a_hundredth_of_a_cent_is_refused(
    workdir, command, value, must_say
):
    """float() took 1_000, ' 5' and Arabic-Indic digits, and 1e-320 (a subnormal) passed the
    range 'above 0': a sweep priced at nothing, with a price no one pays."""
    (workdir / "measured.yaml").write_text("{}\n")
    where = ["--output", str(workdir / "runs"), "--dry-run", "--nodes", "1"]
    if command == "predict":
        where = ["--from", "measured.yaml", "--nodes", "8"]
    refused([command, *where, "--price-per-node-hour", value], workdir, must_say)


def test_a_price_of_a_hundredth_of_a_cent_or_in_an_exponent_is_taken():
    from dtrun.cli.cost import checked_usd

    assert checked_usd("price_per_node_hour", "0.0001") == 0.0001
    assert checked_usd("price_per_node_hour", "1e3") == 1000.0
    assert checked_usd("max_cost", ".5") == 0.5


@pytest.mark.parametrize("flag", ["--resume", "--rerun"])
def test_a_run_directory_of_a_name_no_file_can_have_is_no_such_directory(workdir, flag):
    """300 bytes in one part of a path: pathlib's is_dir() raised ENAMETOOLONG, a traceback."""
    refused(["bench", flag, "r" * 300], workdir, f"{flag} {'r' * 300}: no such run directory")


def test_a_file_given_for_a_run_directory_names_the_directory_that_holds_it(workdir):
    run = workdir / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "report.md").write_text("# a report\n")
    refused(["report", str(run / "report.md")], workdir, "it is a file, not a directory")
    refused(["compare", str(run / "report.md"), str(run)], workdir, f"holds it: {run}")
    (workdir / "notes.txt").write_text("")
    refused(["report", "notes.txt"], workdir, "e.g. runs/<run-id>")


def test_max_cost_refuses_a_real_sweep_before_anything_is_asked_for(workdir):
    # no --dry-run: the refusal comes before the hosts are reached and before runs/ is made
    # (hosts that do not resolve, so a sweep that got past it could not start anything)
    args = [
        "bench", "--output", str(workdir / "runs"),
        "--hosts", "nohost-a.invalid:1,nohost-b.invalid:1", "--connect-timeout", "1",
        "--nodes", "1,2", "--price-per-node-hour", "98.32", "--max-cost", "50",
    ]  # fmt: skip
    refused(args, workdir, "estimated cost $78.66 is above --max-cost 50")


@pytest.mark.parametrize(("name", "content", "must_say"), HOSTS, ids=[n for n, _, _ in HOSTS])
def test_a_bad_hosts_file(workdir, name, content, must_say):
    path = workdir / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    for command in (["bench", "--dry-run"], ["run", "--dry-run"], ["exec"]):
        tail = ["--", "true"] if command[0] == "exec" else []
        tail = ["--", "python", "x.py"] if command[0] == "run" else tail
        refused(
            [*command, "--output", str(workdir / "runs"), "--hosts", name, *tail][:]
            if command[0] != "exec"
            else [*command, "--hosts", name, *tail],
            workdir,
            must_say,
        )


@pytest.mark.parametrize(("name", "content", "must_say"), OUTPUTS, ids=[n for n, _, _ in OUTPUTS])
def test_a_bad_outputs_file(workdir, name, content, must_say):
    path = workdir / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    refused(
        ["bench", "--dry-run", "--output", str(workdir / "runs"), "--outputs", name],
        workdir,
        must_say,
    )


@pytest.mark.parametrize(("settings", "must_say"), SETTINGS, ids=[str(s) for s, _ in SETTINGS])
def test_bad_stack_settings(settings, must_say):
    with pytest.raises((ConfigError, CatalogError)) as caught:
        cluster_spec({**GOOD_SETTINGS, **settings}, today=TODAY)
    error = caught.value
    assert error.exit_code == 2
    assert must_say in error.message
    assert error.fix or "\n  next:" in error.message or "use " in error.message


def test_the_table_holds_at_least_a_hundred_bad_inputs():
    assert len(CLI) + len(HOSTS) + len(OUTPUTS) + len(SETTINGS) >= 100


@pytest.mark.parametrize("launcher", ["mpirun", "deepspeed"])
def test_a_key_path_with_a_space_for_a_head_only_launcher(workdir, launcher):
    """mpirun's plm_rsh_args and pdsh's PDSH_SSH_ARGS_APPEND split ssh options on spaces."""
    (workdir / "hosts.yaml").write_text("key: /keys/my key\nhosts: [a, b]\n")
    refused(
        ["bench", "--dry-run", "--output", str(workdir / "runs"), "--hosts", "hosts.yaml",
         "--launcher", launcher, "--nodes", "2"],
        workdir,
        "the key path '/keys/my key' has a space",
    )  # fmt: skip


def test_a_value_click_refuses_is_quoted_cut_short_not_whole(workdir):
    # Past int()'s 4,300-digit limit click itself refuses --steps and quoted all 5,000 digits:
    # 70 lines of the error panel.
    args = ["bench", "--output", str(workdir / "runs"), "--dry-run", "--steps", "9" * 5000]
    refused(args, workdir, "(5,000 characters)")
    output = CliRunner(env={"COLUMNS": "80"}).invoke(app, args).output
    assert len(output.splitlines()) < 10, output
