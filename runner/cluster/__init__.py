"""Which machines: every inventory source (the embedded cluster, hosts files, stack outputs
and the node registry) and the readiness barrier, opened into an Inventory and the executor that
reaches it (connect.py); the check of node 0's ssh to the others (peers.py). May import execute,
plan (the launchers' ssh options), azure, spec, errors, render.
"""
