"""What Python's ``site`` module imports at start-up from dtrun's step hook directory: it loads
the step hook and then the user's own ``sitecustomize`` (docs/your-training.md "How steps are
timed").

`dtrun bench -- PROGRAM` puts this directory first on every process's PYTHONPATH. With
``DTRUN_STEP_HOOK=1`` this file loads ``_dtrun_stephook.py`` beside it by its file path, as the
module ``_dtrun_stephook``, and that module loads the dtrun files it needs the same way
(runner/workloads/noise.py and files.py as ``_dtrun_noise`` and ``_dtrun_files``): nothing is
imported by a name a program could shadow (a ``runner.py`` beside the program shadowed
``runner`` for the whole process). A hook that does not load leaves its reason in the rank's
step record of a process that imported torch, so the launch fails naming it.

Then the ``sitecustomize`` this file shadows (the next one on ``sys.path``: the user's, or
Debian's) is imported under its own name, as Python would have imported it: a module or a
package, its exception raised into ``site`` as without dtrun, and ``import sitecustomize`` in
the program gets it.

Standard library only. Python 3.10.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_HOOK = "_dtrun_stephook"  # the step hook's module: a name no program uses
_HERE = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib at start-up


def _load(name: str, path: str) -> Any:
    """The module at ``path``, loaded by its path as ``name`` (in sys.modules while it runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module at {path}", path=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _load_hook() -> None:
    """Load the step hook by its file path and start it; a failure is the record's."""
    try:
        _load(_HOOK, os.path.join(_HERE, f"{_HOOK}.py")).start()  # noqa: PTH118
    except Exception as exc:
        sys.modules.pop(_HOOK, None)
        _note_failure(f"load: {type(exc).__name__}: {exc}")


def _note_failure(error: str) -> None:
    """A hook that did not load: a process that imported torch leaves a step record saying
    why (runner/sweep/programresult.py fails the launch on it), any other process nothing."""
    import atexit

    atexit.register(_write_failure, error, os.getcwd())  # noqa: PTH109 - the launcher's cwd


# the rank variables of every launcher, as the hook reads them (_dtrun_stephook._RANK_VARS)
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK", "SLURM_PROCID")


def _write_failure(error: str, cwd: str) -> None:
    folder = os.environ.get("DTRUN_STEP_DIR")
    if "torch" not in sys.modules or not folder:
        return
    import json
    from pathlib import Path

    ranks = (os.environ.get(name, "") for name in _RANK_VARS)
    rank = next((value for value in ranks if value.isdigit()), f"pid{os.getpid()}")
    record = {"schema": "dtrun.steps/1", "rank": rank, "step_ends_s": [], "errors": [error]}
    try:  # runner/workloads/files.py, by its path too
        files = _load("_dtrun_files", os.path.join(os.path.dirname(_HERE), "files.py"))  # noqa: PTH118, PTH120
        path = Path(cwd) / folder / f"rank-{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomic(path, (json.dumps(record) + "\n").encode())
    except Exception:  # a full disk must not change the program's exit
        return


def _chain() -> None:
    """Import the ``sitecustomize`` this one shadows, under that name, as Python would have:
    from the rest of ``sys.path``, a module or a package; what it raises goes to ``site``,
    which reports it as it would without dtrun. None found: this module stays."""
    import importlib.machinery
    import importlib.util

    rest = [e for e in sys.path if os.path.abspath(e or ".") != _HERE]  # noqa: PTH100
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # Python's import takes the module from sys.modules once this file has run, so the
    # program's `import sitecustomize` gets the user's.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get("DTRUN_STEP_HOOK") == "1" and _HOOK not in sys.modules:
    _load_hook()
_chain()
