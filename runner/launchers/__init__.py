"""The launcher registry: one small module per launcher, looked up by name."""

from __future__ import annotations

from runner.launchers.base import Launcher, PlanContext
from runner.launchers.deepspeed import DeepSpeedLauncher
from runner.launchers.horovodrun import Horovodrun
from runner.launchers.mpirun import Mpirun
from runner.launchers.tensorflow import Tensorflow
from runner.launchers.torchrun import Torchrun

LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher
    for launcher in (Torchrun(), DeepSpeedLauncher(), Horovodrun(), Mpirun(), Tensorflow())
}

__all__ = ["LAUNCHERS", "Launcher", "PlanContext"]
