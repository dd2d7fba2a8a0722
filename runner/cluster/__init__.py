"""Which machines: every inventory source (the embedded cluster, hosts files, stack outputs
and the node registry) and the readiness barrier; the check of node 0's ssh to the others
(peers.py). The engines (runner/engines/) open them into an Inventory and the executor that
reaches it. May import execute, plan (the launchers' ssh options), azure, spec, errors, render.
"""
