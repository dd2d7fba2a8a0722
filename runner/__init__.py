"""dtrun: measure whether distributed training really scales, from cluster-as-code to report."""

import warnings

__version__ = "0.1.0"

# cryptography 51 deprecates DSA, and asyncssh's own type hints name its classes: importing
# asyncssh printed ten lines of CryptographyDeprecationWarning on every SSH command, nothing a
# user can act on. Only those: asyncssh's modules, that message.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
