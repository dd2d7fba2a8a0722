"""A description file as `dtrun predict --from` reads it: YAML or JSON, with YAML 1.2's numbers,
no aliases, no key given twice, and a size that a description can have; then checked by
runner/predict/inputs.py's schema."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from dtrun.errors import UsageError
from dtrun.predict.inputs import Description, cut, description

MAX_FILE = 1024 * 1024  # a description is a few lines; more is not one
FORMAT = 'pass a YAML or JSON description, see docs/prediction.md "From a description"'

# YAML 1.2's floats: PyYAML implements YAML 1.1, where `1.3e9` (no sign in the exponent) and
# `1e9` (no dot) are strings. docs/prediction.md's format writes them as people do.
_FLOAT_1_2 = r"""^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[0-9][0-9_]*[eE][-+]?[0-9]+|\.(?:inf|Inf|INF)|[-+]\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"""


def _safe_loader() -> Any:
    """libyaml's safe loader where PyYAML has it (its wheels do): its parser refuses nesting
    past 1,000 levels at once, where the pure-Python one took 37 s over 20,000 `[` (it is
    quadratic in the depth) and recursed past Python's limit over 5,000 `- `."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_loader() -> Any:
    import re

    import yaml

    class Loader(_safe_loader()):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            """A mapping whose key is given twice is refused: YAML 1.2 and JSON (RFC 8259,
            "SHOULD be unique") leave the winner to the reader, and PyYAML keeps the last."""
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    twice = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the constructor below names it
                    continue
                if twice:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {cut(repr(key), 60)} is given twice",
                        key_node.start_mark,
                    )  # fmt: skip
            return super().construct_mapping(node, deep)

    def construct_int(loader: Any, node: Any) -> Any:
        """An int of more digits than Python converts (4,300 unless set otherwise): named too
        long, where int() said "use sys.set_int_max_str_digits()", advice for a programmer."""
        try:
            return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
        except ValueError:
            digits = sum(c.isdigit() for c in node.value)
            raise yaml.constructor.ConstructorError(
                None, None, f"a whole number of {digits:,} digits is too long", node.start_mark
            ) from None

    # a date as written (2001-01-01), as YAML 1.2 and JSON read it: a datetime.date was shown
    # as `datetime.date(2001, 1, 1)` in an error, and 2001-13-45 was a ValueError
    Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: node.value)
    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    Loader.yaml_implicit_resolvers = {
        key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
        for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(_FLOAT_1_2, re.X), list("-+0123456789.")
    )
    return Loader


def _read_bounded(path: Path) -> bytes:
    """The file's bytes, from one open: checked as a regular file of at most MAX_FILE bytes by
    the descriptor it is read from (a check by name, then a read, could read what was swapped
    in between); a FIFO is refused, not waited on (O_NONBLOCK)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(
            f"--from {path}: no such file",
            fix="pass the YAML or JSON file that describes your measured results",
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a directory, a FIFO, /dev/zero
        os.close(fd)
        raise UsageError(
            f"--from {path}: not a regular file",
            fix="pass the YAML or JSON file that describes your measured results",
        )
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_FILE + 1)  # no more, should it have grown since
    if max(info.st_size, len(data)) > MAX_FILE:
        raise UsageError(
            f"--from {path}: larger than {MAX_FILE:,} bytes: not a description", fix=FORMAT
        )
    return data


def read_description(path: Path) -> Description:
    """A description file, YAML (JSON is YAML too): UsageError for a file that is missing, not
    a regular file, too large or not YAML."""
    import yaml

    try:
        text = _read_bounded(path).decode("utf-8")
        # an alias repeats a node without copying it: a few lines can stand for billions of
        # values for the checks below to walk ("billion laughs"); the format has no use for one
        events = yaml.parse(text, Loader=_safe_loader())
        if any(isinstance(event, yaml.AliasEvent) for event in events):
            raise UsageError(
                f"--from {path}: YAML aliases (*name) are not part of the format",
                fix="write each value out in full",
            )
        data = yaml.load(text, Loader=yaml_loader())
    except RecursionError:  # the pure-Python parser, where libyaml is missing
        raise UsageError(f"--from {path}: nested too deep: not a description", fix=FORMAT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--from {path}: cannot be read", why=str(exc), fix=FORMAT) from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an int of over 4,300 digits
        why = cut(" ".join(str(exc).split()))
        if "is given twice" in why:
            raise UsageError(
                f"--from {path}: a key is given twice", why=why, fix="give each key once"
            ) from None
        problem, mark = getattr(exc, "problem", None) or "", getattr(exc, "problem_mark", None)
        if problem.endswith("digits is too long") and mark is not None:
            raise UsageError(
                f"--from {path}, line {mark.line + 1}: {problem}",
                why=f"dtrun reads whole numbers of at most {sys.get_int_max_str_digits():,} "
                "digits; no measured figure needs more",
                fix=f"write it in fewer digits (1.3e9 for 1,300,000,000); {FORMAT}",
            ) from None
        raise UsageError(f"--from {path}: not YAML or JSON", why=why, fix=FORMAT) from None
    return description(data, str(path))
