"""Golden files: compare rendered objects to YAML under tests/golden/; UPDATE_GOLDEN=1 rewrites."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

GOLDEN = Path(__file__).resolve().parent / "golden"


def check_golden(relpath: str, objects: Any) -> None:
    path = GOLDEN / relpath
    text = yaml.safe_dump_all(objects if isinstance(objects, list) else [objects],
                              sort_keys=True, default_flow_style=False)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{path} differs: inspect, then UPDATE_GOLDEN=1 to accept"
