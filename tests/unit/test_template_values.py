"""Every template, every value: nothing reaches a script or config unquoted.

Each template is rendered once the way dtrun renders it (every launcher's scripts and launch
files, the SSH wrapper and stop script, the peer and readiness checks, Scheduled Events, the
Slurm and Spark scripts, cloud-init, slurm.conf and gres.conf), and its context recorded. Then
every text value in that context, one at a time, is replaced by a hostile one. The render must
either stop with UnsafeValueError (the value would have landed unquoted) or give a file in which
the hostile value starts no line of its own and, for shell, that `bash -n` accepts. The
executed proof, with stub launchers, is tests/unit/test_injection.py; the rules that make this hold
are in runner/render.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from dtrun.cluster.peers import PeerSsh, check_script
from dtrun.cluster.program import program_script
from dtrun.cluster.readiness import check_script as readiness_script
from dtrun.engines.embedded.inventory import local_cluster
from dtrun.engines.ray.session import ray_inventory
from dtrun.engines.registry import ENGINES  # noqa: F401 - the engines' own launchers, registered
from dtrun.engines.slurm.executor import wrapper
from dtrun.engines.spark.executor import driver_script
from dtrun.engines.spark.inventory import spark_inventory
from dtrun.engines.ssh.remote import launch_command
from dtrun.errors import UnsafeValueError
from dtrun.execute.guard import stop_script
from dtrun.infra.cloudinit import render_cloud_init
from dtrun.infra.slurm import slurm_files
from dtrun.locations import templates_dir
from dtrun.plan.resolve import resolve_bench
from dtrun.plan.sweep import plan_sweep
from dtrun.render import environment
from dtrun.spec.cluster import SshAccess
from dtrun.spec.request import BenchSpec, Program, ProgramKind, RunSpec
from tests.conftest import require_tool
from tests.infra.test_cloudinit import CASES as BOOTS
from tests.infra.test_slurm import boot as slurm_boot
from tests.infra.test_slurm import slurm_cluster
from tests.plans import build_run_plan
from tests.unit.test_injection import CASES as LAUNCHES

MARK = "/tmp/dtrun-never-made"
HOSTILE = f"x\ntouch {MARK} #'\"$(touch {MARK})`touch {MARK}`\r\n;touch {MARK}"
SSH = SshAccess(port=2222, identity_file="/keys/id_ed25519", known_hosts_file="/k/known_hosts")


def _produce() -> None:
    """Render every template as dtrun does."""
    for case in LAUNCHES.values():
        cluster = local_cluster(2, python_bin="/opt/venv/bin", code_dir="/opt/c", cpu_count=4)
        inventory = replace(cluster, ssh=case.ssh)
        spec = RunSpec(
            "r1",
            Program(ProgramKind.SCRIPT, "train.py", ("a",)),
            nodes=2,
            procs_per_node=case.procs,
            launcher=case.launcher,
            env=(("WANDB_PROJECT", "p"),),
            launch=case.options,
        )
        plan = build_run_plan(inventory, spec)
        wrapper(plan, "r1", "/v/bin/python", "/c/dtrun")
        driver_script(plan.rdzv_id, "spark://h:7077", "/opt/venv/bin/python", "/opt/c", "tag1")
        check_script(plan, PeerSsh(("-p", "2222", "-i", "/keys/id_ed25519")))
        readiness_script(replace(inventory, ssh=SSH), inventory.nodes[0])
    # `dtrun bench -- PROGRAM`: the step hook's lines in every launcher's script
    for launcher in ("torchrun", "mpirun"):
        program = Program(ProgramKind.SCRIPT, "train.py", ("--ws", "{world_size}"))
        bench = BenchSpec("r1", launcher=launcher, node_counts=(2,), program=program)
        cluster = local_cluster(2, python_bin="/v/bin", code_dir="/c", cpu_count=4)
        plan_sweep(resolve_bench(bench), cluster)
    launch_command(
        "/tmp/dtrun/r1/n1/r1", "node-0.sh", "tag1", 5.0, python="/v/bin/python", package="/c/dtrun"
    )
    stop_script("tag1", 5.0)
    for kind, target in ((ProgramKind.SCRIPT, "/w/t.py"), (ProgramKind.EXECUTABLE, "./run.sh")):
        program_script(Program(kind, target))
    program_script(Program(ProgramKind.EXECUTABLE, "train-cli"))
    environment().get_template("remote/scheduled-events.sh.j2").render(
        version="0", imds="http://169.254.169.254"
    )
    spark = RunSpec(
        "r1", Program(ProgramKind.SCRIPT, "train.py"), nodes=2, launcher="torchdistributor"
    )
    build_run_plan(spark_inventory("spark://h:7077", 2), spark)
    nodes = [{"NodeManagerAddress": f"10.0.0.{i}", "Alive": True, "Resources": {"CPU": 1}}
             for i in (1, 2)]  # fmt: skip
    trainer = replace(spark, launcher="torchtrainer")
    build_run_plan(ray_inventory("h:6379", nodes), trainer)  # registered by the engine registry
    for boot in (
        *BOOTS.values(),
        slurm_boot("head", slurm_cluster()),
        slurm_boot("node", slurm_cluster()),
    ):
        render_cloud_init(boot)
        slurm_files(boot.cluster)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Each template's contexts as dtrun rendered it."""
    seen: dict[str, list[dict[str, Any]]] = {}
    original = jinja2.Template.render

    def record(self: jinja2.Template, *args: Any, **kwargs: Any) -> str:
        assert self.name is not None
        seen.setdefault(self.name, []).append(dict(*args, **kwargs))
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jinja2.Template, "render", record)
        _produce()
    return seen


def _script_templates() -> set[str]:
    """Every template but the reports and the parents others extend (rendered through them)."""
    root = templates_dir()
    names = {str(p.relative_to(root)) for p in root.rglob("*.j2")}
    parents = {
        parent
        for name in names
        for parent in re.findall(r'{%\s*extends\s*"([^"]+)"', (root / name).read_text())
    }
    return {name for name in names if not name.startswith("report")} - parents


def test_every_script_and_config_template_is_rendered_here(rendered):
    missing = _script_templates() - set(rendered)
    assert not missing, f"templates this test never renders: {sorted(missing)}"


def _texts(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every text in a context: through dicts, lists, tuples and dataclasses."""
    if isinstance(value, str) and not isinstance(value, Enum):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(item, (*path, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _texts(item, (*path, index))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _texts(getattr(value, field.name), (*path, field.name))


def _swapped(value: Any, path: tuple[Any, ...], new: str) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _swapped(value[head], rest, new)}
    if isinstance(value, list | tuple):
        items = list(value)
        items[head] = _swapped(items[head], rest, new)
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return replace(value, **{head: _swapped(getattr(value, head), rest, new)})


_INJECTED_LINE = re.compile(rf"^\s*;?touch {re.escape(MARK)}", re.MULTILINE)


def _shape(value: Any, texts: list[str]) -> Any:
    """A YAML document's keys and list lengths, its strings collected into ``texts``."""
    if isinstance(value, dict):
        return {key: _shape(item, texts) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item, texts) for item in value]
    if isinstance(value, str):
        texts.append(value)
    return type(value).__name__


def _assert_same_yaml(benign: str, hostile: str, where: str) -> None:
    """The hostile value changed no key and no list, and where it landed it is whole."""
    texts: list[str] = []
    assert _shape(yaml.safe_load(hostile), texts) == _shape(yaml.safe_load(benign), []), where
    for text in texts:
        assert MARK not in text or HOSTILE in text, f"{where}: read back as {text!r}"


def _marker_commands(script: str) -> list[str]:
    """The commands of a script, as shfmt's parser reads it, that would make the marker."""
    done = subprocess.run(
        [require_tool("shfmt"), "--to-json"], input=script, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    found: list[str] = []

    def literal(word: dict[str, Any]) -> str:
        return "".join(part.get("Value", "") for part in word.get("Parts", []))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            words = [literal(word) for word in node.get("Args") or []]
            if node.get("Type") == "CallExpr" and words[:1] == ["touch"] and MARK in words:
                found.append(" ".join(words))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(done.stdout))
    return found


def _bash_accepts(text: str) -> bool:
    done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    return done.returncode == 0


def test_a_hostile_value_in_any_field_of_any_template_is_quoted_or_refused(rendered):
    tried = refused = 0
    for name, contexts in sorted(rendered.items()):
        template = environment().get_template(name)
        shell = name.endswith(".sh.j2")
        for context in contexts[:2]:  # one rendering of each shape is enough per field
            for path in _texts(context):
                if path[0] in _COMPOSED:
                    continue
                tried += 1
                try:
                    text = template.render(**_swapped(context, path, HOSTILE))
                except UnsafeValueError:
                    refused += 1
                    continue
                except (TypeError, ValueError, KeyError, AttributeError, jinja2.TemplateError):
                    continue  # the template computes with this value: not text it places
                where = f"{name} with {'.'.join(map(str, path))} hostile"
                if name.endswith(".yaml.j2"):
                    plain = template.render(**_swapped(context, path, "plainword0"))
                    _assert_same_yaml(plain, text, where)
                    continue
                if shell:
                    assert _bash_accepts(text), f"{where}: bash -n refuses it\n{text}"
                    assert not _marker_commands(text), f"{where}: runs a command\n{text}"
                else:
                    assert not _INJECTED_LINE.search(text), f"{where}: a line of its own\n{text}"
    assert tried > 200 and refused > 0  # the fields were found, and some are refused


# Where each filter's output is right. shquote'd text inside "..." or '...' is not quoted
# (its $(...) would run inside double quotes); oneline keeps a comment a comment, but is no
# quoting for a command; verbatim is for fragments dtrun composes from its own constants.
_QUOTE_IN_QUOTES = re.compile(r"""["'][^"'\s$]*\{\{[^}]*\|\s*(shquote|shwords)[^}]*\}\}""")
# template variable -> the context entry it comes from, which dtrun composes from constants
_VERBATIM = {"expression": "ranks", "wait_for_end": "wait_for_end", "names": "node_lists"}
_VERBATIM_ALLOWED = set(_VERBATIM)
_COMPOSED = set(_VERBATIM.values())


def _template_lines() -> Iterator[tuple[str, int, str]]:
    root = templates_dir()
    for name in sorted(_script_templates()):
        for number, line in enumerate((root / name).read_text().splitlines(), 1):
            yield name, number, line


def test_quoting_filters_are_used_only_where_they_quote():
    wrong = []
    for name, number, line in _template_lines():
        where = f"{name}:{number}: {line.strip()}"
        if _QUOTE_IN_QUOTES.search(line):
            wrong.append(f"{where} (shell quoting inside quotes)")
        shell = name.endswith(".sh.j2")
        comment = line.lstrip().startswith("#")
        if shell and "| oneline" in line and not comment:
            wrong.append(f"{where} (oneline outside a comment)")
        if comment and re.search(r"\|\s*(shquote|shwords)", line):
            wrong.append(f"{where} (shell quoting in a comment: a quoted line break ends it)")
        for used in re.findall(r"\{\{\s*([\w.]+)\s*\|\s*verbatim", line):
            if used not in _VERBATIM_ALLOWED:
                wrong.append(f"{where} (verbatim on {used})")
    assert not wrong, "\n".join(wrong)


def test_the_rules_test_finds_what_it_looks_for(tmp_path: Path):
    # The patterns above match the mistakes they name (so a pass means something).
    assert _QUOTE_IN_QUOTES.search('echo "{{ x | shquote }}"')
    assert not _QUOTE_IN_QUOTES.search("echo {{ x | shquote }}")
    assert _INJECTED_LINE.search(f"# a\ntouch {MARK} #")
    assert _marker_commands(f'echo "$(touch {MARK})"') == [f"touch {MARK}"]
    assert _marker_commands(f"echo 'a\ntouch {MARK}'") == []
