"""Operator settings from the environment (the Helm chart sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorConfig:
    runner_image: str = "nightshift-runner:dev"
    # Coalescing: a pass runs at most this often per object, however many events arrive.
    min_pass_interval: float = 1.0
    # Progress-only status updates (counts moved, nothing else) are written at most this
    # often; phase and condition changes are written at once.
    progress_interval: float = 10.0
    # Level-based resync even when no event arrives.
    resync: float = 60.0
    # The KWOK provider's instance catalog (prices, families); "" finds the local
    # cluster's. On EKS prices come from AWS instead.
    instance_catalog: str = ""

    @classmethod
    def from_env(cls) -> OperatorConfig:
        return cls(
            runner_image=os.environ.get("NIGHTSHIFT_RUNNER_IMAGE", cls.runner_image),
            min_pass_interval=float(os.environ.get("NIGHTSHIFT_MIN_PASS_INTERVAL",
                                                   cls.min_pass_interval)),
            progress_interval=float(os.environ.get("NIGHTSHIFT_PROGRESS_INTERVAL",
                                                   cls.progress_interval)),
            resync=float(os.environ.get("NIGHTSHIFT_RESYNC", cls.resync)),
            instance_catalog=os.environ.get("NIGHTSHIFT_INSTANCE_CATALOG", ""),
        )
