"""Engines: where the nodes come from and how a node's script starts, stops and streams. One
package per engine (embedded, ssh, slurm, spark), each implementing ``Engine`` (base.py) in its
engine.py; registry.py lists them and opens the one the options chose. May import cluster,
execute, record, plan, azure, spec, errors, render; only cli and sweep import engines.
"""
