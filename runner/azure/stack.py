"""The only user of pulumi.automation: bring a stack up, read its outputs, destroy it.

The program is infra/, named by Pulumi.yaml (runner/azure/project.py says where Pulumi works:
the checkout's root, or ~/.config/dtrun/pulumi for an install); the stack's settings live in
Pulumi.<stack>.yaml there or are set with `pulumi config set`.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dtrun.azure.config import cluster_spec
from dtrun.azure.expiry import MAX_HOURS, deadline
from dtrun.azure.project import project_folder, stack_settings, workspace
from dtrun.azure.settingcheck import NAMESPACE
from dtrun.errors import DtrunError, Lines, UsageError, indent
from dtrun.extras import need
from dtrun.redact import redact_cuts
from dtrun.spec.cluster import ClusterSpec, ExpirySpec

if TYPE_CHECKING:
    from pulumi import automation as auto

INSTALL = "curl -fsSL https://get.pulumi.com | sh"
_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}\Z")

Printer = Callable[[str], None]


class PulumiMissingError(UsageError):
    """No Pulumi CLI on this machine: a setup to fix before the command (exit 2), as a missing
    option or file is."""

    def __init__(self, command: str) -> None:
        super().__init__(
            "the Pulumi CLI is not installed",
            why="dtrun drives Pulumi through it, and no `pulumi` is on PATH",
            fix=f"install it with `{INSTALL}` (https://www.pulumi.com/docs/install/), then run "
            f"`{command}` again",
        )


class StackError(DtrunError):
    """Pulumi could not do what was asked of a stack."""


@dataclass(frozen=True)
class Outputs:
    values: dict[str, Any]
    secret_keys: frozenset[str]

    def shown(self) -> dict[str, Any]:
        """The outputs with secret values masked, for the terminal."""
        return {k: "[secret]" if k in self.secret_keys else v for k, v in self.values.items()}


def check_stack_name(name: str) -> str:
    if not _STACK_NAME.match(name):
        raise UsageError(
            f"--stack {name!r} is not a stack name",
            fix="use letters, digits, '-', '_' and '.', e.g. --stack dev",
        )
    return name


def _tail(text: str, lines: int = 15) -> Lines:
    """Pulumi's last lines, each indented under the message (runner/errors.py Lines); a secret
    a line break cuts masked on each side first (redact_cuts), the side the tail drops too."""
    said = redact_cuts(text).strip().splitlines()[-lines:]
    return Lines("its last lines:\n" + indent("\n".join(said)))


@contextlib.contextmanager
def _pulumi(command: str, stack: str) -> Iterator[None]:
    """Turn the Automation API's failures into dtrun errors that say what to do."""
    need("pulumi.automation", "azure")  # exit 2 naming dtrun[azure] where it is missing
    from pulumi.automation import errors

    try:
        yield
    except FileNotFoundError:
        raise PulumiMissingError(command) from None
    except errors.StackNotFoundError:
        raise StackError(
            f"there is no stack {stack!r} in this project",
            fix=f"create it with `dtrun up --stack {stack}`",
        ) from None
    except errors.CommandError as error:
        raise StackError(f"`{command}` failed", why=_tail(str(error))) from None


def _select(stack: str, *, create: bool) -> auto.Stack:
    from pulumi import automation as auto

    select = auto.create_or_select_stack if create else auto.select_stack
    folder, env = workspace()  # the checkout's root, or the user's folder for an install
    options = auto.LocalWorkspaceOptions(env_vars=env) if env else None
    return select(stack_name=stack, work_dir=str(folder), opts=options)


def stack_config(stack: auto.Stack) -> ClusterSpec:
    """Validate the stack's dtrun: settings before Pulumi runs the program (exit 2 if bad)."""
    values = {
        key: item.value
        for key, item in stack.get_all_config().items()
        if key.startswith(f"{NAMESPACE}:")
    }
    return cluster_spec(values)


def check_stack_file(stack: str) -> None:
    """The settings Pulumi.<stack>.yaml holds, checked before the Pulumi CLI is looked for: a bad
    one is said whether Pulumi is installed or not (stack_config checks them all again, as
    Pulumi reads them)."""
    values = stack_settings(stack, project_folder())
    if values is not None:
        cluster_spec(values)


def _created(stack: auto.Stack) -> list[str]:
    """The resources a stack holds now, as TYPE NAME lines (best effort, for error messages)."""
    with contextlib.suppress(Exception):
        resources = (stack.export_stack().deployment or {}).get("resources", [])
        return [
            f"{r['type']} {r['urn'].rsplit('::', 1)[-1]}"
            for r in resources
            if r.get("custom") and not r["type"].startswith("pulumi:")
        ]
    return []


def _pin_deadline(stack: auto.Stack, expiry: ExpirySpec, hours: float) -> str | None:
    """Write dtrun:expiresAt (now + hours) into the stack's settings, for the program to tag
    the group with; with dtrun:ttlHours 0, remove it. Returns the deadline."""
    from pulumi import automation as auto

    key = f"{NAMESPACE}:expiresAt"
    if not expiry.ttl_hours:
        if key in stack.get_all_config():
            stack.remove_config(key)
        return None
    at = deadline(datetime.datetime.now(datetime.UTC), hours)
    stack.set_config(key, auto.ConfigValue(value=at))
    return at


def _update(stack: auto.Stack, name: str, on_output: Printer) -> Outputs:
    try:
        result = stack.up(on_output=on_output, color="never")
    except Exception:
        created = _created(stack)
        if created:
            listed = "\n".join(f"  {line}" for line in created)
            on_output(
                f"{len(created)} resources exist after the failed update (still billing):\n"
                f"{listed}\nremove them with `dtrun down --stack {name}`"
            )
        raise
    return Outputs(
        {k: v.value for k, v in result.outputs.items()},
        frozenset(k for k, v in result.outputs.items() if v.secret),
    )


def up(stack: str, on_output: Printer, on_spec: Callable[[ClusterSpec], None]) -> Outputs:
    """pulumi up, the deadline first set to dtrun:ttlHours from now. ``on_spec`` hears the
    checked settings before anything is created (what `dtrun up` says the cluster bills an
    hour, the warning about ttlHours 0)."""
    command = f"dtrun up --stack {stack}"
    check_stack_file(stack)
    with _pulumi(command, stack):
        selected = _select(stack, create=True)
        spec = stack_config(selected)
        on_spec(spec)
        _pin_deadline(selected, spec.expiry, spec.expiry.ttl_hours)
        return _update(selected, stack, on_output)


def extend(stack: str, hours: float, on_output: Printer) -> Outputs:
    """Move the deadline to ``hours`` from now: dtrun:expiresAt, then pulumi up. A whole update,
    not one targeted at the group, so the stack outputs carry the new deadline too; with the
    settings unchanged it changes the group's tags and nothing else."""
    command = f"dtrun extend --stack {stack} --hours {hours:g}"
    if not 0 < hours <= MAX_HOURS:
        raise UsageError(
            f"--hours {hours:g} is not a time to expire in",
            fix=f"give hours from now, more than 0 and at most {MAX_HOURS}",
        )
    check_stack_file(stack)
    with _pulumi(command, stack):
        selected = _select(stack, create=False)
        spec = stack_config(selected)
        if not spec.expiry.ttl_hours:
            raise UsageError(
                f"stack {stack} has no deadline to move (dtrun:ttlHours is 0)",
                fix=f"pulumi config set --stack {stack} dtrun:ttlHours HOURS, then "
                f"`dtrun up --stack {stack}`",
            )
        _pin_deadline(selected, spec.expiry, hours)
        return _update(selected, stack, on_output)


def outputs(stack: str) -> Outputs:
    with _pulumi(f"dtrun outputs --stack {stack}", stack):
        values = _select(stack, create=False).outputs()
    return Outputs(
        {k: v.value for k, v in values.items()}, frozenset(k for k, v in values.items() if v.secret)
    )


def down(stack: str, on_output: Printer) -> list[str]:
    """Destroy every resource of the stack; returns what was there. Safe to repeat."""
    command = f"dtrun down --stack {stack}"
    need("pulumi.automation", "azure")
    from pulumi.automation import errors

    with _pulumi(command, stack):
        try:
            selected = _select(stack, create=False)
        except errors.StackNotFoundError:
            return []
        existing = _created(selected)
        try:
            selected.destroy(on_output=on_output, color="never")  # a no-op on an empty stack
        except Exception:
            left = _created(selected)  # Pulumi's state after the resources it did remove
            if left:
                listed = "\n".join(f"  {line}" for line in left)
                on_output(
                    f"{len(left)} resources still exist after the failed destroy (still "
                    f"billing):\n{listed}\nrun `dtrun down --stack {stack}` again; if it fails "
                    "the same way, delete their resource group in the Azure portal or with "
                    "`az group delete --name GROUP` (its tag dtrun-cluster names the cluster)"
                )
            raise
    return existing
