"""The launcher registry: one small module per launcher, looked up by name."""

from __future__ import annotations

from runner.plan.launchers.base import Launcher, PlanContext
from runner.plan.launchers.deepspeed import DeepSpeedLauncher
from runner.plan.launchers.horovodrun import Horovodrun
from runner.plan.launchers.mpirun import Mpirun
from runner.plan.launchers.spark import HorovodSparkLauncher, TorchDistributorLauncher
from runner.plan.launchers.tensorflow import Tensorflow
from runner.plan.launchers.torchrun import Torchrun

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
