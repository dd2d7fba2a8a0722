"""The launcher registry: one small module per launcher, looked up by name. An engine's own
launchers (``Engine.own_launchers``) live in its package and join through ``register``, which
the engine registry calls (runner/engines/registry.py)."""

from __future__ import annotations

from dtrun.plan.launchers.base import Launcher, PlanContext
from dtrun.plan.launchers.deepspeed import DeepSpeedLauncher
from dtrun.plan.launchers.horovodrun import Horovodrun
from dtrun.plan.launchers.mpirun import Mpirun
from dtrun.plan.launchers.spark import HorovodSparkLauncher, TorchDistributorLauncher
from dtrun.plan.launchers.tensorflow import Tensorflow
from dtrun.plan.launchers.torchrun import Torchrun

BUILT_IN: dict[str, Launcher] = {
    launcher.name: launcher
    for launcher in (
        Torchrun(),
        DeepSpeedLauncher(),
        Horovodrun(),
        Mpirun(),
        Tensorflow(),
        TorchDistributorLauncher(),
        HorovodSparkLauncher(),
    )
}

LAUNCHERS: dict[str, Launcher] = dict(BUILT_IN)  # and every engine's own, once registered


def register(launcher: Launcher) -> None:
    """An engine's own launcher, looked up by name as the built-in ones are."""
    LAUNCHERS.setdefault(launcher.name, launcher)


__all__ = ["BUILT_IN", "LAUNCHERS", "Launcher", "PlanContext", "register"]
