"""The dtrun Pulumi program (placeholder).

`Pulumi.yaml` points here (`main: infra/`). The Azure InfiniBand cluster — network, head VM,
GPU scale set and shared storage as components — is not written yet; until it is, `pulumi up`
stops with this message instead of creating a half-built stack.
"""

raise SystemExit(
    "dtrun: the Azure cluster program in infra/ is a placeholder; "
    "use the embedded cluster (`dtrun bench`) until it lands."
)
