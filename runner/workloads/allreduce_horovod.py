"""The all-reduce workload under Horovod: ``hvd.allreduce`` (out of place) and
``hvd.allreduce_`` (in place) timed, checked and reported exactly as ``allreduce`` does
torch.distributed's (schema dtrun.allreduce/1, ``"library": "horovod"``).

Imports only torch, horovod, the standard library and its sibling modules.
"""

from __future__ import annotations

from dtrun.workloads import allreduce
from dtrun.workloads.result import exit_now
from dtrun.workloads.train_horovod import HOROVOD_MODES, init_horovod


def main(argv: list[str] | None = None) -> int:
    return allreduce.run(allreduce.parse_args(argv), init_horovod, HOROVOD_MODES, "horovod")


if __name__ == "__main__":
    exit_now(main())
