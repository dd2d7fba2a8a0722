"""constraints.txt (./dev pin): what ./dev setup installs, each package at one version."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.paths import REPO


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[A-Za-z0-9._-]+", name), f"not NAME==VERSION: {line!r}"
        Version(version)  # a version, no URL, no local label
        assert "+" not in version, line
        key = canonicalize_name(name)
        assert key not in pins, f"{name} pinned twice"
        pins[key] = version
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += extra
    return [Requirement(text) for text in listed]


def test_every_dependency_of_every_extra_is_pinned_inside_its_range():
    pins = _pins()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in constraints.txt: run ./dev pin"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside {requirement}"
        )


def test_torch_and_horovod_are_pinned_at_the_versions_dev_installs():
    dev = (REPO / "dev").read_text()
    torch = re.search(r'^TORCH_PIN="torch==([^"]+)"$', dev, re.MULTILINE)
    horovod = re.search(r"^HOROVOD_VERSION=(\S+)$", dev, re.MULTILINE)
    assert torch and horovod
    pins = _pins()
    assert pins["torch"] == torch.group(1)
    assert pins["horovod"] == horovod.group(1)
