"""dtrun's step hook: every optimizer step of a user's PyTorch program, timed with no change to
the program (docs/your-training.md "How steps are timed").

`dtrun bench -- PROGRAM` puts this directory first on every process's PYTHONPATH; Python
imports ``sitecustomize`` from it at start-up, which loads this file by its path as the module
``_dtrun_stephook`` and calls ``start()`` when ``DTRUN_STEP_HOOK=1`` (the launch scripts set it).
It does nothing until the program itself
imports ``torch.optim.optimizer``: a launcher, a data loader's helper, a TensorFlow or JAX
program pays for nothing. Then it loads the two dtrun files it uses by their paths, under names
of its own (runner/workloads/noise.py as ``_dtrun_noise``, files.py as ``_dtrun_files``: a
program's ``runner`` cannot shadow them), and registers torch's global optimizer step hooks
(``register_optimizer_step_pre_hook`` / ``register_optimizer_step_post_hook``), which every
``torch.optim.Optimizer`` runs around its ``step``: plain loops, DDP, FSDP, DeepSpeed's engine
(its base optimizer), Horovod's ``DistributedOptimizer``, the Hugging Face Trainer and
Lightning as they are. A step inside a step (Horovod's optimizer calls its base class's) counts
once; a gradient-accumulation loop's micro-batches are no steps, its optimizer step is one.

At exit each process writes ``rank-<RANK>.json`` (schema ``dtrun.steps/1``) into
``DTRUN_STEP_DIR``: the end time of every step (``time.perf_counter``, this process's clock),
the time each step's last gradient was accumulated on this rank (``grads_ready_s``: gradient
hooks registered at the first step's end, so the first has none), the gradient bytes by
dtype, and a digest of the trainable parameters after the last step,
with what tells whether they are sharded (FSDP's DTensor or flat parameters; under DeepSpeed,
the engine found on the first step's call stack gives the ZeRO stage and the model's own
parameters, where the stepping optimizer holds a flat partition), and the noise window: the
machine's and the process's CPU times from the end of the last warm-up step (``DTRUN_WARMUP``)
to exit, as runner/workloads/noise.py reads them for dtrun's own workload, and how it ended:
its exit time and the uncaught exception's type, if one ended it, and whether it said a write
failed for want of space (runner/sweep/earlyexit.py).
A forked child starts with no steps: only the steps a process made itself are its record, so a
child that exits after its parent does not overwrite the parent's. It never writes to
the program's stdout or stderr; a failure of the hook is recorded in the file, never raised into
the program.

Standard library at import; torch only once the program has imported it. Python 3.10.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import time
from typing import Any

SCHEMA = "dtrun.steps/1"
_TARGET = "torch.optim.optimizer"
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK", "SLURM_PROCID")
_LOCAL_RANK_VARS = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "HOROVOD_LOCAL_RANK",
    "SLURM_LOCALID",
)


class _Steps:
    """What the hooks saw, by optimizer (a GAN's two optimizers are timed apart)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No steps: at start-up, and in a forked child (its parent's steps are the parent's)."""
        self.depth = 0
        self.ends: dict[int, list[float]] = {}  # id(optimizer) -> each step's end time
        self.first: dict[int, float] = {}  # id(optimizer) -> its first step's start
        self.optimizers: dict[int, Any] = {}
        self.order: list[int] = []  # optimizers in the order they first stepped
        self.deepspeed: dict[int, tuple[int, Any]] = {}  # id(optimizer) -> ZeRO stage, engine
        self.errors: list[str] = []
        self.backend: str | None = None  # torch.distributed's, at the first step
        # the machine's and this process's CPU times when the timed steps start (the end of
        # the last warm-up step), by optimizer: the noise window (runner/workloads/noise.py)
        self.window_start: dict[int, Any] = {}
        # each step's last gradient accumulated on this rank, by optimizer (None: not seen),
        # and the latest seen since its last step: each rank's local time in a step
        self.grads_ready: dict[int, list[float | None]] = {}
        self.last_grad: dict[int, float] = {}

    def pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # from the call stack, not a counter: a step that raised (and was caught) ran no post
        # hook, and a counter would stay one too high and drop every later step
        self.depth = _step_depth()
        if self.depth == 1 and id(optimizer) not in self.first:
            self.first[id(optimizer)] = time.perf_counter()
            if "deepspeed" in sys.modules:  # once per optimizer, inside its first step
                try:
                    self._find_engine(optimizer)
                except Exception as exc:  # DeepSpeed's internals moved: the digest says less
                    self.errors.append(f"deepspeed: {type(exc).__name__}: {exc}")

    def _find_engine(self, optimizer: Any) -> None:
        """The DeepSpeed engine whose step this is, found on the call stack: under ZeRO 1 and 2
        the stepping torch optimizer holds this rank's flat partition, not the model."""
        import weakref

        frame: Any = sys._getframe(2)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if candidate is not None and _is_deepspeed_engine(candidate):
                stage = int(candidate.zero_optimization_stage())
                self.deepspeed[id(optimizer)] = (stage, weakref.ref(candidate))
                return
            frame = frame.f_back

    def post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.depth = _step_depth() - 1
        if self.depth > 0:
            return  # the inner step of a wrapping optimizer: the outer one counts
        key = id(optimizer)
        if self.backend is None:  # at the first step: a program may end its group before exit
            self.backend = _backend()
        first = key not in self.ends
        if first:
            self.ends[key] = []
            self.grads_ready[key] = []
            self.optimizers[key] = optimizer
            self.order.append(key)
        if len(self.ends[key]) == _TIMED_FROM - 1:  # before the end is taken: the import
            self._start_window(key)  # and the reads count in the last warm-up step, not timed
        self.grads_ready[key].append(self.last_grad.pop(key, None))
        self.ends[key].append(time.perf_counter())
        if first:  # after the end: the registration is no step's time
            self._hook_gradients(key, optimizer)

    def _hook_gradients(self, key: int, optimizer: Any) -> None:
        """When each of the optimizer's parameters (under DeepSpeed, its engine's model's) has
        its gradient accumulated, the time: the last one in a step ends the rank's local
        compute, before the step's final gradient wait (docs/your-training.md "Which rank is
        slow"). torch.Tensor.register_post_accumulate_grad_hook, torch 2.1 on."""
        last = self.last_grad

        def ready(_: Any) -> None:
            last[key] = time.perf_counter()

        try:
            engine = self.deepspeed.get(key, (None, lambda: None))[1]()
            if engine is None:
                params = [p for group in optimizer.param_groups for p in group["params"]]
            else:
                params = list(engine.parameters())
            for param in params:
                if param.requires_grad:
                    param.register_post_accumulate_grad_hook(ready)
        except Exception as exc:  # an older torch, a parameter of another kind: no timing
            self.errors.append(f"gradients: {type(exc).__name__}: {exc}")

    def _start_window(self, key: int) -> None:
        try:
            self.window_start[key] = _dtrun("noise").snapshot()
        except Exception as exc:  # no noise figures: never the program's failure
            self.errors.append(f"noise: {type(exc).__name__}: {exc}")


def _step_depth() -> int:
    """How many optimizer steps are under way in this thread: torch's step wrapper
    (torch/optim/optimizer.py, ``profile_hook_step``'s ``wrapper``) frames on the stack."""
    depth = 0
    frame: Any = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wrapper" and code.co_filename.endswith(_OPTIMIZER_FILE):
            depth += 1
        frame = frame.f_back
    return max(depth, 1)


_OPTIMIZER_FILE = os.path.join("torch", "optim", "optimizer.py")  # noqa: PTH118 - no pathlib


def _is_deepspeed_engine(thing: Any) -> bool:
    # By class name along the MRO (PipelineEngine is one too): no isinstance on arbitrary
    # objects, and no import of deepspeed from the hook.
    return any(
        kind.__name__ == "DeepSpeedEngine" and kind.__module__.startswith("deepspeed.")
        for kind in type(thing).__mro__
    )


def _timed_from() -> int:
    """The step whose end starts the timed steps: --warmup's (DTRUN_WARMUP), at least the first
    (which has no start the hook can see), as runner/sweep/programresult.py counts them."""
    try:
        return max(int(os.environ.get("DTRUN_WARMUP", "")), 1)
    except ValueError:  # unset or not a whole number ("²" passes str.isdigit, not int)
        return 1


_TIMED_FROM = _timed_from()
_STEPS = _Steps()
_STARTED = time.perf_counter()
# where the launcher started this process: a relative DTRUN_STEP_DIR is taken from here
_CWD = os.getcwd()  # noqa: PTH109 - no pathlib at start-up


def _rank() -> str:
    return _first_number(_RANK_VARS) or f"pid{os.getpid()}"


def _first_number(names: tuple[str, ...]) -> str | None:
    """The first of these variables that holds a number: each launcher names ranks its way."""
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return value
    return None


def _backend() -> str | None:
    """torch.distributed's backend, where the program has a process group."""
    try:
        distributed = sys.modules.get("torch.distributed")
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return str(distributed.get_backend())
    except Exception:  # a half-torn-down group
        return None
    return None


def _raised_write() -> bool:
    """Whether the exception that ended the process is a file write that failed (a full disk:
    _dtrun_steprecord.py), its own error whatever its type; False where that cannot be said."""
    try:
        return _dtrun("steprecord").raised_write(getattr(sys, "last_value", None)) is True
    except Exception:
        return False


def _record() -> dict[str, Any]:
    steps = _STEPS
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "rank": _rank(),
        "local_rank": _first_number(_LOCAL_RANK_VARS),
        "node": os.environ.get("DTRUN_NODE_NAME", ""),
        "address": os.environ.get("DTRUN_NODE_ADDR", ""),
        "pid": os.getpid(),
        "hooked_s": _STARTED,
        "optimizers": len(steps.order),
        "step_ends_s": [],
        "first_step_start_s": None,
        "gradient_bytes": {},
        "params": None,
        "param_digest": None,
        "sharded": None,
        "noise_window": None,
        "errors": steps.errors,
        # how the process ended: when (Unix time, to set the ranks' ends in order) and the
        # uncaught exception that ended it (Python sets sys.last_type before exit), or None
        "ended_at_s": time.time(),
        "raised": getattr(getattr(sys, "last_type", None), "__name__", None),
        # whether that exception says a file could not be written (a full disk): the rank's
        # own error, whatever its type (torch.save's is a RuntimeError, as a lost peer's is)
        "raised_write": _raised_write(),
    }
    if not steps.order:
        return record
    # the optimizer that stepped most (the first to step, on a tie) is the training loop's
    key = max(steps.order, key=lambda k: (len(steps.ends[k]), -steps.order.index(k)))
    optimizer = steps.optimizers[key]
    record["step_ends_s"] = steps.ends[key]
    record["grads_ready_s"] = steps.grads_ready[key]
    record["first_step_start_s"] = steps.first.get(key)
    if key in steps.window_start:  # from the timed steps' start to this process's exit
        try:
            noise = _dtrun("noise")
            record["noise_window"] = noise.rank_window(steps.window_start[key], noise.snapshot())
        except Exception as exc:
            steps.errors.append(f"noise: {type(exc).__name__}: {exc}")
    try:
        deepspeed = steps.deepspeed.get(key, (None, lambda: None))
        backend = steps.backend or _backend()
        fields = _dtrun("steprecord").model_fields(optimizer, deepspeed, backend, steps.errors)
        record.update(fields)
    except Exception as exc:  # the record's module did not load: the steps still count
        steps.errors.append(f"record: {type(exc).__name__}: {exc}")
    return record


def _write() -> None:
    import json
    from pathlib import Path

    folder = os.environ.get("DTRUN_STEP_DIR")
    if not folder:
        return
    record = _record()
    if not record["step_ends_s"] and not record["errors"]:
        return  # a process that trained nothing (a helper, a launcher) leaves no file
    with contextlib.suppress(Exception):  # a full disk must not change the program's exit
        path = Path(_CWD) / folder / f"rank-{record['rank']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        _dtrun("files").write_atomic(path, (json.dumps(record) + "\n").encode())


_HERE = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib


def _dtrun(name: str) -> Any:
    """dtrun's file for ``name``, loaded by its path as ``_dtrun_<name>``: this directory's
    ``_dtrun_<name>.py``, or runner/workloads/<name>.py (standard library only). Never by the
    name ``runner``, which a program's own module may hold."""
    import importlib.util

    private = f"_dtrun_{name}"
    if private in sys.modules:
        return sys.modules[private]
    path = os.path.join(_HERE, f"{private}.py")  # noqa: PTH118
    if not os.path.isfile(path):  # noqa: PTH113
        path = os.path.join(os.path.dirname(_HERE), f"{name}.py")  # noqa: PTH118, PTH120
    spec = importlib.util.spec_from_file_location(private, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[private]
        raise
    return module


def _register(module: Any) -> None:
    # dtrun's files now, while the program imports torch: not inside a timed step
    for name in ("files", "noise", "steprecord"):
        try:
            _dtrun(name)
        except Exception as exc:
            _STEPS.errors.append(f"load {name}: {type(exc).__name__}: {exc}")
    module.register_optimizer_step_pre_hook(_STEPS.pre)
    module.register_optimizer_step_post_hook(_STEPS.post)
    atexit.register(_write)


class _Loader(importlib.abc.Loader):
    """torch.optim.optimizer's own loader, then the hooks registered on the module."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            _register(module)
        except Exception as exc:  # an older torch without global step hooks
            _STEPS.errors.append(f"hooks: {type(exc).__name__}: {exc}")
            atexit.register(_write)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for the program to import torch.optim.optimizer; steps aside for everything else."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # once
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def start() -> None:
    """Wait for the program to import torch.optim.optimizer (sitecustomize.py calls this with
    DTRUN_STEP_HOOK=1); a forked child forgets its parent's steps."""
    os.register_at_fork(after_in_child=_STEPS.reset)
    if _TARGET not in sys.modules:
        sys.meta_path.insert(0, _Finder())
