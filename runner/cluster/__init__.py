"""Which machines: every inventory source (the embedded cluster, hosts files, stack outputs
and the node registry) and the readiness barrier, opened into an Inventory and the executor that
reaches it (connect.py). May import execute, azure, spec, errors, render.
"""
