"""What ends or bends a line of text wherever dtrun writes a value: one pattern for the input
checks (runner/cluster/names.py) and the renderer's one-line form (runner/render.py); and how
counts and percents read wherever dtrun shows them. Stdlib."""

from __future__ import annotations

import math
import re

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, and the bidirectional
# controls that reorder what a line shows ("Trojan Source", CVE-2021-42574: U+202A-202E,
# U+2066-2069, and the marks U+061C, U+200E, U+200F; Unicode's UAX #9 lists them).
# And lone surrogates: a byte that was not UTF-8, as Python decodes a command line (PEP 383),
# or a record's JSON escape of one; no UTF-8 file or terminal can hold one.
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
SURROGATES = "\ud800-\udfff"
CONTROL = re.compile(rf"[\x00-\x1f\x7f-\x9f\u2028\u2029{BIDI}{SURROGATES}]")


def escaped(character: str) -> str:
    """A control character as Python writes it in a string: ``\\n``, ``\\x1b``, ``\\u2028``."""
    return repr(character)[1:-1]


def one_line(text: str) -> str:
    """``text`` with every control character (CONTROL) written as its escape: one line."""
    return CONTROL.sub(lambda m: escaped(m.group(0)), text)


def noun(count: int, word: str) -> str:
    """``word`` as English counts it: 'node' for 1, 'nodes', 'processes', 'launches' else."""
    if count == 1:
        return word
    return f"{word}{'es' if word.endswith(('s', 'ch', 'sh', 'x')) else 's'}"


def plural(count: int, word: str) -> str:
    """'1 node', '2 nodes', '1 process', '3 processes', '0 launches'."""
    return f"{count} {noun(count, word)}"


def host_label(node: str, address: str | None) -> str:
    """A node as reports name it: dtrun's name and the host the hosts file, stack or scheduler
    gave it, 'node-1 (127.0.0.3)'; the name alone where it is the host, or none is known."""
    return f"{node} ({address})" if address and address != node else node


def percent(value: float, target: float | None = None) -> str:
    """A fraction as a whole percent, '92%'; beside a ``target``, with as many decimals as keep
    it on its side of the target (at most 3, then rounded away from it): 0.8996 against 0.9
    is '89.96%', never a '90%' beside a verdict of below. A non-zero fraction never reads '0%':
    below half a percent it takes the decimals that show it (0.003 is '0.3%'), and under
    0.0005% it is '<0.001%'."""
    text = _percent(value, target)
    if value > 0 and float(text[:-1]) == 0:  # too small for three decimals, yet not zero
        return "<0.001%"
    return text


def _percent(value: float, target: float | None) -> str:
    # the fewest decimals that show a non-zero value as non-zero (0 for half a percent or more)
    least = next((d for d in range(3) if value == 0 or float(f"{value * 100:.{d}f}")), 3)
    if target is None:
        return f"{value * 100:.{least}f}%"
    for digits in range(least, 3):
        text = f"{value * 100:.{digits}f}"
        if (float(text) / 100 >= target) == (value >= target):
            return f"{text}%"
    scaled = value * 100_000
    return f"{(math.ceil(scaled) if value >= target else math.floor(scaled)) / 1000:.3f}%"


def lost_percent(efficiency: float, target: float | None = None) -> str:
    """What an efficiency below 1 loses, as the complement of how ``percent`` shows it, so the
    two add up to 100: '10.04%' beside '89.96%', '99.7%' beside '0.3%' (never '100%')."""
    shown = percent(efficiency, target)
    if shown.startswith("<"):
        return ">99.999%"
    number = shown[:-1]
    return f"{100 - float(number):.{len(number.partition('.')[2])}f}%"


def percent_range(low: float, high: float, target: float | None = None) -> str:
    """An interval of fractions as percents, '86-89.97%', each end as ``percent`` shows it."""
    return f"{percent(low, target)[:-1]}-{percent(high, target)}"
