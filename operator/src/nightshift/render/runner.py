"""The runner's share of a stage's pod: pure, spec in, pod fragments out.

The seam between the Job renderer (render/jobs.py) and the task runner
(nightshift.runner): the Job renderer asks for these parts and splices them in
before the step containers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nightshift.api.pipelinerun import Archive, Stage, StorageRef


@dataclass(frozen=True)
class RunnerParts:
    # Stage-in (a regular init container) then the commit sidecar (an init container
    # with restartPolicy: Always); the Job renderer puts them before the steps.
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    # Added to every step container (env and volume mounts).
    step_env: list[dict[str, Any]] = field(default_factory=list)
    step_volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    share_process_namespace: bool = False


def runner_parts(
    *,
    run: str,
    namespace: str,
    stage: Stage,
    storage: Mapping[str, StorageRef],
    archive: Archive | None,
    runner_image: str,
    local_disk: bool = False,
) -> RunnerParts | None:
    """None when the stage needs no runner: no inputs, no outputs, no archive."""
    if not stage.inputs and not stage.outputs and archive is None:
        return None
    raise NotImplementedError("runner parts: being built in the runner issue")
