"""One spelling of a field path in messages: `spec.stages[2].forEach.fromS3`."""

from __future__ import annotations

from typing import Any


def field_path(*parts: Any) -> str:
    """Join path parts: strings become `.name`, integers `[i]`; a leading dotted string
    is kept as it is."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p != "":
            out += f".{p}" if out else str(p)
    return out
