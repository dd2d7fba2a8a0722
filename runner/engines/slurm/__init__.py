"""Slurm: the nodes of an allocation, found or asked for, one srun step per launch
(docs/slurm.md)."""
