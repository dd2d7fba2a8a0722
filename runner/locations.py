"""Where dtrun's own files are: in a git checkout (an editable install) or in an installed wheel.

A checkout keeps templates/, infra/ and Pulumi.yaml at its root, above the package's folder. The
wheel carries them inside the package: ``_templates/``, ``infra/`` (the Pulumi program) and
``Pulumi.yaml`` beside it, so `dtrun up` finds its program either way (docs/install.md).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def checkout() -> Path | None:
    """The root of the checkout dtrun runs from, or None when it runs from an installed wheel.

    A checkout's root, the folder above runner/ (the link dtrun resolved), holds pyproject.toml
    and infra/. A wheel puts nothing of dtrun's above its package.
    """
    folder = PACKAGE.parent
    if (folder / "pyproject.toml").is_file() and (folder / "infra" / "__main__.py").is_file():
        return folder
    return None


def templates_dir() -> Path:
    """templates/ at the checkout's root; ``_templates/`` in the package of a wheel."""
    root = checkout()
    candidate = root / "templates" if root is not None else PACKAGE / "_templates"
    if not candidate.is_dir():
        raise FileNotFoundError(f"dtrun's templates are not in {candidate}")
    return candidate


def project_dir() -> Path:
    """The Pulumi project's folder: Pulumi.yaml, whose ``main: infra/`` is the program beside it.

    The checkout's root, or the package's folder in a wheel.
    """
    return checkout() or PACKAGE
