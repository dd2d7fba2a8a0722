"""A command that needs an extra that is not installed names it and exits 2 (issue 40).

Each extra's modules are made unimportable here as a missing package is (``sys.modules[name] =
None``: the import raises ModuleNotFoundError). tests/e2e/test_install.py checks the same on a
real install without extras.
"""

from __future__ import annotations

import sys
import tomllib

import pytest
import yaml
from typer.testing import CliRunner

from dtrun.azure.project import prepare
from dtrun.cli import bench as bench_cli
from dtrun.cli.app import app
from dtrun.extras import EXTRAS, MissingExtraError, need
from tests.paths import REPO

CASES = {
    "azure": (("pulumi", "pulumi.automation"), ("up", "--stack", "dev")),
    "s3": (
        ("boto3", "boto3.session"),
        ("bench", "--nodes", "1", "--results", "s3://dtrun-results/runs"),
    ),
    "spark": (
        ("pyspark",),
        (
            "bench",
            "--nodes",
            "1",
            "--spark",
            "spark://127.0.0.1:7077",
            "--launcher",
            "torchdistributor",
        ),
    ),
    "workloads": (("torch",), ("bench", "--nodes", "1", "--quiet")),
}


def never_launch(*args, **kwargs):
    raise AssertionError("a launch began without the extra it needs")


@pytest.mark.parametrize("extra", sorted(CASES))
def test_a_command_needing_a_missing_extra_names_it_and_exits_2(extra, monkeypatch, tmp_path):
    modules, command = CASES[extra]
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setattr(bench_cli, "_sweep", never_launch)
    monkeypatch.chdir(tmp_path)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, list(command))
    assert result.exit_code == 2, result.output
    assert f"pip install 'dtrun[{extra}]'" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert list(tmp_path.iterdir()) == []  # nothing written before the refusal


def test_every_extra_the_code_names_is_declared_in_pyproject():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(EXTRAS) <= set(declared["optional-dependencies"])


def test_an_importable_module_is_returned_and_a_missing_one_names_its_extra(monkeypatch):
    assert need("json", "s3").__name__ == "json"
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(MissingExtraError) as raised:
        need("boto3", "s3")
    assert raised.value.exit_code == 2
    assert raised.value.extra == "s3"


def test_an_install_works_in_the_users_folder_with_the_installed_program(tmp_path):
    package = tmp_path / "site-packages" / "dtrun"
    (package / "infra").mkdir(parents=True)
    (package / "infra" / "__main__.py").write_text("")
    (package / "Pulumi.yaml").write_bytes((REPO / "Pulumi.yaml").read_bytes())
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "config")}

    folder, env = prepare(None, environ, package)
    assert folder == tmp_path / "config" / "dtrun" / "pulumi"
    assert env == {"PULUMI_PYTHON_CMD": sys.executable}
    project = yaml.safe_load((folder / "Pulumi.yaml").read_text())
    assert (
        (folder / project["main"]) / "__main__.py"
    ).resolve() == package / "infra" / "__main__.py"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip"}}
    original = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["config"] == original["config"]  # the settings' types and defaults

    written = (folder / "Pulumi.yaml").stat().st_mtime_ns
    (folder / "Pulumi.dev.yaml").write_text("config: {}\n")  # a stack's settings stay
    assert prepare(None, environ, package) == (folder, env)
    assert (folder / "Pulumi.yaml").stat().st_mtime_ns == written  # unchanged: not rewritten
    assert (folder / "Pulumi.dev.yaml").is_file()


def test_a_checkout_works_in_its_root_as_it_is(tmp_path):
    assert prepare(REPO, {"XDG_CONFIG_HOME": str(tmp_path)}, tmp_path) == (REPO, {})
    assert list(tmp_path.iterdir()) == []
