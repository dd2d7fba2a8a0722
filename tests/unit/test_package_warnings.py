"""What importing dtrun sets for the whole process (runner/__init__.py). In a fresh Python:
pytest restores its own warning filters after collecting a test module."""

from __future__ import annotations

import subprocess
import sys

WARN = """
import warnings, dtrun
with warnings.catch_warnings(record=True) as caught:
    for module in ("asyncssh.crypto.misc", "elsewhere"):
        warnings.warn_explicit("DSA is deprecated and support will be removed.", UserWarning,
                               module + ".py", 32, module=module)
print(" ".join(w.filename for w in caught))
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_asyncssh_s_dsa_deprecation_is_not_shown_to_users():
    """cryptography 51 warns as asyncssh names its DSA classes: ten lines on every SSH command
    of a fresh install. The same warning from anywhere else still shows."""
    done = _python(WARN)
    assert done.stdout.split() == ["elsewhere.py"], done.stdout + done.stderr


def test_a_dtrun_ssh_command_s_imports_print_no_warning():
    done = _python("import dtrun.engines.ssh.session, asyncssh")
    assert done.returncode == 0 and done.stderr == "", done.stderr
