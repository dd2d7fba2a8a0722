"""dtrun as a user installs it (issue 40): the sdist and wheel built from this checkout, their
metadata checked, the wheel installed into a fresh venv beside nothing but the CPU torch pin, and
dtrun run from a folder outside the repository.

One test, in steps, because each step needs the one before: building and installing take most of
its time (about a minute; torch's wheel comes from the local disk, the rest from pip's cache).
"""

from __future__ import annotations

import email
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from readme_renderer import markdown

from tests.paths import REPO

pytestmark = pytest.mark.e2e

WHEELS = REPO / ".cache" / "wheels" / "install-test"  # ./dev's INSTALL_WHEELS
# The optional parts a plain `pip install dtrun` must not pull (pyproject.toml's extras).
EXTRAS_ONLY = ("pulumi", "pulumi-azure-native", "pulumi-tls", "boto3", "botocore", "pyspark")


def torch_pin() -> str:
    """The CPU torch this project develops against: ./dev's TORCH_PIN, the one source of it."""
    found = re.search(r'^TORCH_PIN="([^"]+)"$', (REPO / "dev").read_text(), re.MULTILINE)
    assert found, "./dev names no TORCH_PIN"
    return found.group(1)


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    return done


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build(out: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it (python -m build), offline with this venv's
    hatchling."""
    ok(run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO, cwd=out))
    [sdist] = out.glob("dtrun-*.tar.gz")
    [wheel] = out.glob("dtrun-*.whl")
    return sdist, wheel


def test_the_wheel_installs_beside_torch_alone_and_runs_outside_the_repository(no_leftovers):
    work = no_leftovers
    dist = work / "dist"
    dist.mkdir()
    sdist, wheel = build(dist)

    # The metadata: twine reads both as PyPI would; the README renders as the description
    # (twine check passes Markdown without rendering it, so readme_renderer renders it here).
    ok(run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel, cwd=work))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        text = archive.read("dtrun-0.1.0.dist-info/METADATA").decode()
    metadata = email.message_from_string(text)  # the headers; the body is the description
    assert metadata["Description-Content-Type"] == "text/markdown"
    described = text.partition("\n\n")[2]
    assert described == (REPO / "README.md").read_text()
    html = markdown.render(described)
    assert html is not None
    assert '<h1 id="user-content-dtrun">dtrun' in html
    assert {name.split("/")[0] for name in names} == {"dtrun", "dtrun-0.1.0.dist-info"}
    for shipped in ("dtrun/Pulumi.yaml", "dtrun/infra/__main__.py", "dtrun/infra/program.py",
                    "dtrun/_templates/report.md.j2", "dtrun/workloads/train.py"):  # fmt: skip
        assert shipped in names
    with tarfile.open(sdist) as archive:
        members = {Path(member).relative_to(Path(member).parts[0]).as_posix()
                   for member in archive.getnames() if "/" in member}  # fmt: skip
    assert {"pyproject.toml", "README.md", "Pulumi.yaml", "infra/__main__.py"} <= members

    # A fresh venv: the CPU torch pin, then the wheel with no extra, from the wheels ./dev setup
    # downloaded (this network namespace has no internet).
    assert WHEELS.is_dir(), f"no {WHEELS}: ./dev setup downloads the wheels this test installs"
    venv = work / "venv"
    ok(run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work))
    python = venv / "bin" / "python"
    pip = (sys.executable, "-m", "pip", "--python", python)
    offline = ("--no-index", "--find-links", WHEELS, "--quiet", "--no-compile")
    ok(run(*pip, "install", *offline, torch_pin(), cwd=work))
    ok(run(*pip, "install", *offline, wheel, cwd=work))
    listed = ok(run(*pip, "list", "--format", "json", cwd=work)).stdout
    installed = {item["name"].lower() for item in json.loads(listed)}
    assert "dtrun" in installed
    assert not installed & set(EXTRAS_ONLY), "a plain install pulled an extra's packages"

    # Outside the repository, with a `runner` package of the user's own on PYTHONPATH that
    # breaks on import (the name dtrun's code had): dtrun imports nothing by that name.
    outside = work / "elsewhere"
    (outside / "mine" / "runner").mkdir(parents=True)
    (outside / "mine" / "runner" / "__init__.py").write_text("raise ImportError('my runner')\n")
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(work / "home"),
        "XDG_CONFIG_HOME": str(work / "config"),
        "PYTHONPATH": str(outside / "mine"),
        "LANG": "C.UTF-8",
    }
    dtrun = venv / "bin" / "dtrun"

    bench = run(dtrun, "bench", "--nodes", "1,2", "--repeat", "2", "--steps", "6", "--warmup",
                "2", "--run-id", "installed", "--port", "29630", "--quiet",
                cwd=outside, env=env)  # fmt: skip
    ok(bench)
    run_dir = outside / "runs" / "installed"
    assert (run_dir / "report.md").is_file()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest.get("git") is None  # an install records no checkout's revision

    predicted = ok(run(dtrun, "predict", run_dir, "--nodes", "4,8", cwd=outside, env=env))
    assert "8" in predicted.stdout
    sizes = ok(run(dtrun, "sizes", cwd=outside, env=env))
    assert "Standard_ND96isr_H100_v5" in sizes.stdout
    assert "--stack" in ok(run(dtrun, "up", "--help", cwd=outside, env=env)).stdout

    # The program `dtrun up` would run is the installed one, by a path Pulumi can follow.
    check = (
        "from dtrun.azure.project import workspace; from dtrun.azure.config import schema; "
        "import json, pathlib; folder, env = workspace(); "
        "text = (folder / 'Pulumi.yaml').read_text(); import yaml; p = yaml.safe_load(text); "
        "print(json.dumps({'main': str((folder / p['main']).resolve()), 'runtime': p['runtime'], "
        "'env': env, 'settings': len(schema())}))"
    )
    project = json.loads(ok(run(python, "-c", check, cwd=outside, env=env)).stdout)
    assert Path(project["main"], "__main__.py").is_file()
    assert Path(project["main"]).is_relative_to(venv)
    assert "virtualenv" not in project["runtime"]["options"]
    assert project["env"] == {"PULUMI_PYTHON_CMD": str(python)}
    assert project["settings"] > 5

    # A command that needs a missing extra names it and exits 2, no traceback.
    needing = {
        "azure": ("up", "--stack", "dev"),
        "s3": ("bench", "--nodes", "1", "--results", "s3://bucket/runs"),
    }
    for extra, command in needing.items():
        refused = run(dtrun, *command, cwd=outside, env=env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"pip install 'dtrun[{extra}]'" in refused.stderr
        assert "Traceback" not in refused.stderr
