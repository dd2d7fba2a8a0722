"""The step hook's record of a process's model (runner/workloads/stephook/_dtrun_stephook.py
loads this file by its path as ``_dtrun_steprecord``, at exit): what it trained with, its
gradient bytes, its parameter count, whether its parameters are sharded, and their digest;
and whether the exception that ended it was a failed file write (``raised_write``).

torch only: the program has imported it by the time a step was taken. Python 3.10.
"""

from __future__ import annotations

import errno
import os
from typing import Any


def model_fields(
    optimizer: Any, deepspeed: tuple[int | None, Any], backend: str | None, errors: list[str]
) -> dict[str, Any]:
    """The record's fields from the training loop's optimizer and, under DeepSpeed, its ZeRO
    stage and engine (a weak reference); a failure goes into ``errors``, never raised."""
    fields: dict[str, Any] = {}
    try:
        fields.update(_setting(_params(optimizer), backend))
    except Exception as exc:
        errors.append(f"setting: {type(exc).__name__}: {exc}")
    try:
        params = _params(optimizer)
        stage, engine = deepspeed
        module = engine()
        # The model's own parameters: under DeepSpeed the stepping optimizer may hold flat
        # fp32 partitions, while the gradients reduced are the model's, in its dtype.
        model = params if module is None else [p for p in module.parameters() if p.requires_grad]
        fields["gradient_bytes"] = _gradient_bytes(model)
        fields["params"] = sum(_numel(p) for p in model)
        fields["sharded"] = _sharding(params, stage)
        fields["param_digest"] = _digest(params)
    except Exception as exc:  # the program's own state: never fail its exit for it
        errors.append(f"parameters: {type(exc).__name__}: {exc}")
    return fields


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
    """SHA-256 of each parameter's shape, dtype and bytes, in order. The bytes are read in
    place, through a ctypes array over the contiguous CPU tensor's memory (the buffer protocol
    hashlib takes): bytes(storage) walked them one Python call a byte, 1.4 s a megabyte, a
    minute at exit for an 8.4M-parameter model."""
    import ctypes
    import hashlib

    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for p in params:
            tensor = _local(p).detach().cpu().contiguous()
            digest.update(str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
            size = tensor.numel() * tensor.element_size()
            if size:  # the array reads while ``tensor`` holds its memory
                digest.update((ctypes.c_char * size).from_address(tensor.data_ptr()))
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


def _setting(params: list[Any], backend: str | None) -> dict[str, Any]:
    """What the process trained with: torch, its device, the parameters' dtype, the backend,
    and its peak memory."""
    import platform
    import resource

    import torch

    first = _local(params[0]) if params else None
    device = first.device if first is not None else torch.device("cpu")
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


# What an exception's text says where a write failed on a full disk: OSError's strerror
# (ENOSPC, EDQUOT), and torch.save's RuntimeErrors, whose text names no errno (torch 2.13 on a
# full tmpfs: "basic_ios::clear: iostream error", then "[enforce fail at inline_container.cc:
# 672] . unexpected pos 576 vs 534"; caffe2/serialize: "PytorchStreamWriter failed writing
# file data/0: file write failed")
_WRITE_FAILED = (
    "No space left on device",
    "Disk quota exceeded",
    "file write failed",
    "PytorchStreamWriter failed writing",
    "basic_ios::clear: iostream error",
)
_SAVING = os.path.join("torch", "serialization.py")  # noqa: PTH118 - torch.save's module


def raised_write(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, is a file write
    that failed: its text says so, or torch.save raised it (torch/serialization.py is on its
    traceback). Never a lost peer's error, whatever its type."""
    for _ in range(8):  # a chain of causes, not a cycle
        if exc is None:
            return False
        try:
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                return True
            if any(said in str(exc) for said in _WRITE_FAILED) or _in_saving(exc):
                return True
        except Exception:  # an exception whose str() fails says nothing
            pass
        exc = exc.__cause__ or exc.__context__
    return False


def _in_saving(exc: BaseException) -> bool:
    """Whether torch.save (torch/serialization.py) is on ``exc``'s traceback."""
    trace = exc.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename.endswith(_SAVING):
            name = trace.tb_frame.f_code.co_name
            if name == "save" or name.startswith("_save"):
                return True
        trace = trace.tb_next
    return False
