"""dtrun's step hook: every optimizer step of a user's PyTorch program, timed with no change to
the program (docs/your-training.md "How steps are timed").

`dtrun bench -- PROGRAM` puts this directory first on every process's PYTHONPATH, so Python
imports this module at start-up (the `site` module imports `sitecustomize`). It does nothing
unless ``DTRUN_STEP_HOOK=1`` (the launch scripts set it), and nothing until the program itself
imports ``torch.optim.optimizer``: a launcher, a data loader's helper, a TensorFlow or JAX
program pays for nothing. Then it registers torch's global optimizer step hooks
(``register_optimizer_step_pre_hook`` / ``register_optimizer_step_post_hook``), which every
``torch.optim.Optimizer`` runs around its ``step``: plain loops, DDP, FSDP, DeepSpeed's engine
(its base optimizer), Horovod's ``DistributedOptimizer``, the Hugging Face Trainer and
Lightning as they are. A step inside a step (Horovod's optimizer calls its base class's) counts
once; a gradient-accumulation loop's micro-batches are no steps, its optimizer step is one.

At exit each process writes ``rank-<RANK>.json`` (schema ``dtrun.steps/1``) into
``DTRUN_STEP_DIR``: the end time of every step (``time.perf_counter``, this process's clock),
the gradient bytes by dtype, and a digest of the trainable parameters after the last step,
with what tells whether they are sharded (FSDP's DTensor or flat parameters; under DeepSpeed,
the engine found on the first step's call stack gives the ZeRO stage and the model's own
parameters, where the stepping optimizer holds a flat partition), and the noise window: the
machine's and the process's CPU times from the end of the last warm-up step (``DTRUN_WARMUP``)
to exit, as runner/workloads/noise.py reads them for dtrun's own workload. It never writes to
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
        if key not in self.ends:
            self.ends[key] = []
            self.optimizers[key] = optimizer
            self.order.append(key)
        if len(self.ends[key]) == _TIMED_FROM - 1:  # before the end is taken: the import
            self._start_window(key)  # and the reads count in the last warm-up step, not timed
        self.ends[key].append(time.perf_counter())

    def _start_window(self, key: int) -> None:
        try:
            from runner.workloads import noise

            self.window_start[key] = noise.snapshot()
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


def _params(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]


def _gradient_bytes(params: list[Any]) -> dict[str, int]:
    by_dtype: dict[str, int] = {}
    for p in params:
        name = str(p.dtype).removeprefix("torch.")
        by_dtype[name] = by_dtype.get(name, 0) + _numel(p) * p.element_size()
    return by_dtype


def _numel(p: Any) -> int:
    """The whole parameter's size: DeepSpeed's ZeRO 3 leaves an empty tensor and ``ds_numel``;
    an FSDP1 flat parameter holds this rank's shard of parameters whose sizes it keeps."""
    if getattr(p, "_is_flat_param", False) and getattr(p, "_numels", None):
        return int(sum(p._numels))
    return int(getattr(p, "ds_numel", None) or p.numel())


def _local(p: Any) -> Any:
    """A parameter's own tensor: a DTensor's local shard (FSDP2), else the parameter."""
    to_local = getattr(p, "to_local", None)
    return to_local() if callable(to_local) else p


def _digest(params: list[Any]) -> str:
    import hashlib

    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for p in params:
            tensor = _local(p).detach().cpu().clone(memory_format=torch.contiguous_format)
            digest.update(str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
            digest.update(bytes(tensor.reshape(-1).view(torch.uint8).untyped_storage()))
    return digest.hexdigest()


def _sharding(params: list[Any], zero_stage: int | None) -> str | None:
    """Why the ranks' parameters are not whole copies of the model, or None."""
    kinds = {type(p).__name__ for p in params}
    if "DTensor" in kinds:
        return "FSDP (DTensor shards)"
    # FSDP1 marks its flat parameters, and with use_orig_params the views into them, with
    # _fsdp_flattened (torch/distributed/fsdp/_common_utils.py, _FSDP_FLATTENED): since torch
    # 2.1 a flat parameter's class is plain Parameter, so its name says nothing.
    if "FlatParameter" in kinds or any(getattr(p, "_fsdp_flattened", False) for p in params):
        return "FSDP (flat parameter shards)"
    if zero_stage:
        return f"DeepSpeed ZeRO stage {zero_stage}"
    return None


def _setting(params: list[Any]) -> dict[str, Any]:
    """What the process trained with: torch, its device, the parameters' dtype, the backend,
    and its peak memory."""
    import platform
    import resource

    import torch

    first = _local(params[0]) if params else None
    device = first.device if first is not None else torch.device("cpu")
    backend = _STEPS.backend or _backend()
    if device.type == "cuda":
        peak, name = torch.cuda.max_memory_allocated(device), torch.cuda.get_device_name(device)
    else:  # Linux: ru_maxrss is in KiB
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        name = platform.processor() or platform.machine()
    return {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": device.type,
        "device_name": name,
        "dtype": str(first.dtype).removeprefix("torch.") if first is not None else None,
        "backend": backend,
        "peak_memory_bytes": int(peak),
    }


def _record() -> dict[str, Any]:
    steps = _STEPS
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "rank": _rank(),
        "local_rank": _first_number(_LOCAL_RANK_VARS),
        "node": os.environ.get("DTRUN_NODE_NAME", ""),
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
    }
    if not steps.order:
        return record
    # the optimizer that stepped most (the first to step, on a tie) is the training loop's
    key = max(steps.order, key=lambda k: (len(steps.ends[k]), -steps.order.index(k)))
    optimizer = steps.optimizers[key]
    record["step_ends_s"] = steps.ends[key]
    record["first_step_start_s"] = steps.first.get(key)
    if key in steps.window_start:  # from the timed steps' start to this process's exit
        try:
            from runner.workloads import noise

            record["noise_window"] = noise.rank_window(steps.window_start[key], noise.snapshot())
        except Exception as exc:
            steps.errors.append(f"noise: {type(exc).__name__}: {exc}")
    try:
        record.update(_setting(_params(optimizer)))
    except Exception as exc:
        steps.errors.append(f"setting: {type(exc).__name__}: {exc}")
    try:
        params = _params(optimizer)
        stage, engine = steps.deepspeed.get(key, (None, lambda: None))
        module = engine()
        # The model's own parameters: under DeepSpeed the stepping optimizer may hold flat
        # fp32 partitions, while the gradients reduced are the model's, in its dtype.
        model = params if module is None else [p for p in module.parameters() if p.requires_grad]
        record["gradient_bytes"] = _gradient_bytes(model)
        record["params"] = sum(_numel(p) for p in model)
        record["sharded"] = _sharding(params, stage)
        record["param_digest"] = _digest(params)
    except Exception as exc:  # the program's own state: never fail its exit for it
        steps.errors.append(f"parameters: {type(exc).__name__}: {exc}")
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
        from runner.workloads.files import write_atomic

        path = Path(_CWD) / folder / f"rank-{record['rank']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(record) + "\n").encode())


def _register(module: Any) -> None:
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


def _chain() -> None:
    """Run the sitecustomize this one shadows (Debian's Python has one), as Python would."""
    import importlib.util
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for entry in sys.path:
        folder = Path(entry or ".").resolve()
        candidate = folder / "sitecustomize.py"
        if folder == here or not candidate.is_file():
            continue
        spec = importlib.util.spec_from_file_location("_dtrun_next_sitecustomize", candidate)
        if spec is not None and spec.loader is not None:
            with contextlib.suppress(Exception):  # as site.py does: a broken one is not ours
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return


if os.environ.get("DTRUN_STEP_HOOK") == "1" and "torch.optim.optimizer" not in sys.modules:
    sys.meta_path.insert(0, _Finder())
_chain()
