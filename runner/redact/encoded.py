"""A secret value as it reads inside base64 and hexadecimal text (a config blob, an HTTP Basic
header, ``xxd -p``): the forms runner/redact/__init__.py looks for beside the value itself."""

from __future__ import annotations

import base64

# A base64 form is looked for from this many digits (42 bits): one of a short value's
# alignments would otherwise be a few digits that any inlined image holds by chance. A value of
# SHORTEST characters has 7 at each alignment (docs/security.md: "base64 at any alignment").
BASE64_SHORTEST = 7
_URL_SAFE = str.maketrans("+/", "-_")


def base64_forms(piece: str) -> set[str]:
    """``piece`` as it reads inside base64 text, at each of the three alignments what precedes
    it may give it (``base64("api:" + key)``, HTTP Basic's), in the standard and URL-safe
    alphabets: only the digits its own bytes decide, so neither what precedes nor what follows
    it nor padding changes them. The digit an unaligned piece's first byte shares with what
    precedes it stays unmasked. As GitHub Actions' runner masks a secret's base64
    (actions/runner, src/Sdk/DTLogging/Logging/ValueEncoders.cs, EnumerateBase64Variations),
    with the digits that precede and follow trimmed."""
    raw = piece.encode()
    found: set[str] = set()
    for before in range(3):  # bytes of the piece's 3-byte group that precede it
        digits = own_digits(raw, before)
        if len(digits) >= BASE64_SHORTEST:
            found |= {digits, digits.translate(_URL_SAFE)}
    return found


def own_digits(raw: bytes, before: int) -> str:
    """The base64 digits of ``raw`` that its own bytes decide, ``before`` bytes of its 3-byte
    group preceding it: from the first digit whose 6 bits all lie in it, to the last."""
    start, end = -(-before * 4 // 3), (before + len(raw)) * 4 // 3
    return base64.b64encode(bytes(before) + raw).decode()[start:end]


def hex_forms(piece: str) -> set[str]:
    """``piece``'s bytes in hexadecimal, lower and upper case (``bytes.hex()``, ``xxd -p``, a
    key printed as hex): two digits a byte, so no alignment to allow for."""
    digits = piece.encode().hex()
    return {digits, digits.upper()}
