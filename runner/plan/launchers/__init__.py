"""The launcher registry: one small module per launcher, looked up by name."""

from __future__ import annotations

from dtrun.plan.launchers.base import Launcher, PlanContext
from dtrun.plan.launchers.deepspeed import DeepSpeedLauncher
from dtrun.plan.launchers.horovodrun import Horovodrun
from dtrun.plan.launchers.mpirun import Mpirun
from dtrun.plan.launchers.spark import HorovodSparkLauncher, TorchDistributorLauncher
from dtrun.plan.launchers.tensorflow import Tensorflow
from dtrun.plan.launchers.torchrun import Torchrun

LAUNCHERS: dict[str, Launcher] = {
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

__all__ = ["LAUNCHERS", "Launcher", "PlanContext"]
