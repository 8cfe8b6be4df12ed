"""What the PipelineRun planner (plan.py) takes in and gives out. Pure data.

`Observed` is everything a pass read (the run, its Jobs, its items, the objects its pods
reference); `Plan` is what the pass writes (manifests to apply, Job patches, the whole
status, events) and when to look again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nightshift.api.events import Event


@dataclass(frozen=True)
class ItemsInfo:
    count: int
    configmaps: tuple[str, ...]


@dataclass(frozen=True)
class Observed:
    run: Mapping[str, Any]
    jobs: Sequence[Mapping[str, Any]]
    items: Mapping[str, ItemsInfo]
    # Per stage: a few {index, exitCode, reason, message[, item][, attempt]} from failed
    # pods; `index` is the pod's completion index within the Job of `attempt` (default 0).
    failure_samples: Mapping[str, Sequence[Mapping[str, Any]]]
    now: datetime
    runner_image: str
    # Images spec.runnerImage may name besides runner_image (NIGHTSHIFT_RUNNER_IMAGES).
    runner_images: Sequence[str] = ()
    # Per lost Job (lost.lost_jobs()): how many of its pods still run or wait (0 or 1 is
    # enough). Its replacement waits for none, so two pods never work on one item.
    live_pods: Mapping[str, int] = field(default_factory=dict)
    # What the API server refused of this pass's writes: (object, why), e.g. ("Job x",
    # "422 Invalid: ..."). Planned once more into an Invalid condition naming the object
    # and the message, which stands until the run ends (Failed once no Job of it runs),
    # rather than retrying the same write.
    refused: Sequence[tuple[str, str]] = ()
    # The SharedStorages spec.storage names (binding.referenced), by name; None: absent.
    shared_storages: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    # The VirtualCluster spec.virtualCluster names, by name; None: absent (references.py).
    virtual_clusters: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    # Whether each ServiceAccount the stages name exists (references.service_accounts).
    service_accounts: Mapping[str, bool] = field(default_factory=dict)
    # The key names of each Secret and ConfigMap the pods reference (references.objects),
    # by name; None: absent. Never their values.
    secrets: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    config_maps: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    # Whether each claim `pvc` storages name exists (references.claims).
    volume_claims: Mapping[str, bool] = field(default_factory=dict)
    # Stages whose items could not be resolved this pass: stage -> (why, invalid).
    # Invalid items make the run Invalid (Failed once its running Jobs end); a source
    # that may still appear (a ConfigMap not yet created) keeps the stage waiting with
    # Progressing=False saying why.
    unresolved: Mapping[str, tuple[str, bool]] = field(default_factory=dict)
    # Running stages whose pods do not start: stage -> (reason, message) (stalled.py).
    stalled: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Stages whose Job or item ConfigMap names an earlier run of the same name still
    # holds (deleted, not yet collected, or orphaned): stage -> what it waits for. They
    # start nothing until those are gone (items.owned_by).
    earlier: Mapping[str, str] = field(default_factory=dict)
    # Stages whose succeededItems is cut: the exact succeeded items, as ranges, from the
    # stage's done-set ConfigMap (pipelinerun/doneset.py; "" when it has none).
    done_items: Mapping[str, str] = field(default_factory=dict)
    # By Job name: the original item of each completion index of a retry Job whose map
    # is its indexes ConfigMaps (names.ANNOTATION_INDEXES_CONFIGMAPS), as read.
    index_maps: Mapping[str, Sequence[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    resolve_items: list[str]
    # Full manifests of objects to create (server-side apply, names.FIELD_MANAGER), in
    # order: ConfigMaps before the Jobs that mount them.
    apply: list[dict[str, Any]]
    delete: list[dict[str, Any]]
    status: dict[str, Any]
    events: list[Event]
    requeue_after: float | None
    # JSON merge patches of existing Jobs' mutable fields (parallelism, suspend). Not
    # server-side apply: an apply naming only these fields would drop the manager's
    # ownership of the (immutable) template and the API server would refuse it.
    patch: list[dict[str, Any]] = field(default_factory=list)
    # Stages whose succeededItems this status cuts: their exact succeeded items, as
    # ranges, for the stage's done-set ConfigMap (written with the status).
    done: dict[str, str] = field(default_factory=dict)
