"""Shared pytest set-up: the package's tests run from the repo root."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # `tests.*` helper modules (s3server, golden_util, bad-input tables) import as a package.
    sys.path.insert(0, str(ROOT))
