"""The frozen, typed values dtrun's stages hand each other, by stage: cluster (which machines),
request (what the user asked), launch (what a plan hands an executor), outcome (how launches
ended). Nothing here does I/O; these modules import the standard library and dtrun.redact only.
"""
