"""Shared pytest set-up: the package's tests run from the repo root."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # `tests.*` helper modules (s3server, golden_util, bad-input tables) import as a package.
    sys.path.insert(0, str(ROOT))


def pytest_configure(config: object) -> None:
    # Tests that stop a part of the shared cluster (the API server, etcd): hack/
    # integration.sh runs them alone, after the rest, so no other test sees the outage.
    config.addinivalue_line(  # type: ignore[attr-defined]
        "markers", "disruptive: stops a part of the cluster every test shares; run alone")
