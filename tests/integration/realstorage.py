"""What the real-node SharedStorage tests share: the images' tag and names, and `place`,
which puts rendered objects on the local cluster's real node."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nightshift.sharedstorage.objects import with_images
from nightshift_localcluster import helminstall
from tests.integration.test_real_node import on_real_node

TAG = "dev"
RUNNER = "nightshift-runner:dev"
REPO = "demo.nightshift.io"


def need_image(node: dict[str, Any], image: str) -> None:
    if problem := helminstall.missing_image(node, image):
        pytest.skip(problem)


def place(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """On the real node, with the :dev images, and with no owner (no SharedStorage
    object exists here: the garbage collector would delete them)."""
    out = []
    for obj in with_images(copy.deepcopy(objs), "", TAG):
        obj["metadata"].pop("ownerReferences", None)
        pod = (obj.get("spec") or {}).get("template", {}).get("spec")
        if pod is not None:
            pod.pop("affinity", None)
            pod.pop("topologySpreadConstraints", None)
            on_real_node(pod)
        out.append(obj)
    return out
