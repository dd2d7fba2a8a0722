"""Which of this machine's environment variables shape a run, and which a node logs in with.

manifest.json records the first (redacted, runner/record/manifest.py), never the whole
environment: a machine's environment holds passphrases, webhooks and dozens of variables that
shape nothing. The choice follows PyTorch's and MLPerf's own records (docs/security.md "What a
run records of this machine"): named families of the libraries a run loads, and the launchers'
own variables. The embedded cluster's nodes get the login's base and those families, as a node
reached by ssh gets its login's (runner/engines/embedded/executor.py). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

# Families by prefix: the communication libraries (NCCL, UCX, libfabric's FI_, Gloo, oneCCL,
# Intel MPI), the accelerators' runtimes (CUDA, cuDNN, cuBLAS, NVIDIA, ROCm, HIP, HSA), the
# thread pools (OpenMP, MKL, OpenBLAS, KMP), PyTorch, Python, TensorFlow, the launchers
# (DeepSpeed's DS_, Horovod, OpenMPI and PMIx, Slurm, Spark) and dtrun's own.
FAMILIES = (
    "NCCL_", "UCX_", "FI_", "GLOO_", "CCL_", "I_MPI_",
    "CUDA_", "CUDNN_", "CUBLAS_", "NVIDIA_", "ROCM_", "ROCR_", "HIP_", "HSA_",
    "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_",
    "TORCH_", "PYTORCH_", "PYTHON", "TF_",
    "DS_", "HOROVOD_", "OMPI_", "PMIX_", "PRTE_", "SLURM_", "SPARK_", "PYSPARK_",
    "DTRUN_",
)  # fmt: skip
# The launchers' contract (docs/launchers.md "The environment each process sees"): each
# launch sets its own, so a node never takes this machine's.
CONTRACT = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
     "LOCAL_WORLD_SIZE", "GROUP_RANK"}
)  # fmt: skip
# Single variables: the loader's, the Python environment's, and the contract.
NAMES = CONTRACT | {"LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV", "CONDA_PREFIX",
                    "CONDA_DEFAULT_ENV"}  # fmt: skip

# What a login gives a node reached by ssh (sshd(8) "LOGIN PROCESS": USER, LOGNAME, HOME, PATH,
# SHELL, MAIL, TZ, and LANG/LC_* where the client sends them), and what the machine's own setup
# gives every login: a terminal, a temporary directory, the proxies.
LOGIN = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "MAIL", "TZ", "LANG", "LANGUAGE", "TERM",
     "TMPDIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
     "no_proxy"}
)  # fmt: skip


def shapes_a_run(name: str) -> bool:
    """A variable of a family a run's libraries or launchers read."""
    return name in NAMES or name.startswith(FAMILIES)


def run_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that shape a run, sorted by name (values as they are: the
    record redacts them)."""
    return {name: env[name] for name in sorted(env) if shapes_a_run(name)}


def _a_job_s(name: str) -> bool:
    """A variable a scheduler or launcher gives one job (who it is, where its peers are), not
    a setting of the machine: a node's launch sets its own."""
    if name.startswith("OMPI_"):
        return not name.startswith("OMPI_MCA_")  # OpenMPI's settings stay; its job's go
    return name in CONTRACT or name.startswith(("SLURM_", "PMIX_", "PRTE_"))


def node_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What an embedded node starts with: ``env``'s login variables (LC_* too) and the
    settings that shape a run, whole (the node needs them), less any job's own; nothing else
    of this machine's environment."""
    return {
        name: value
        for name, value in env.items()
        if name in LOGIN or name.startswith("LC_") or (shapes_a_run(name) and not _a_job_s(name))
    }
