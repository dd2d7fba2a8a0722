"""The dtrun Pulumi program (`Pulumi.yaml`: `main: infra/`): an Azure InfiniBand cluster.

Pulumi runs this folder as a script with the Python dtrun is installed in (.venv in a checkout;
`dtrun up` names its own interpreter otherwise), so dtrun and this program import by name.
"""

import pulumi

from dtrun.azure.catalog import SIZES, retirement_warning
from dtrun.errors import DtrunError
from dtrun.infra.config import load_cluster
from dtrun.infra.program import build

try:
    cluster = load_cluster()
except DtrunError as error:
    # A clean message without a Python traceback in `pulumi up`'s diagnostics.
    raise pulumi.RunError(error.message) from None
warning = retirement_warning(SIZES[cluster.vm_size])
if warning:
    pulumi.log.warn(warning)
for key, value in build(cluster).items():
    pulumi.export(key, value)
