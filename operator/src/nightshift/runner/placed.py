"""Where each input's files landed under the item's inputs/.

Stage-in places inputs one after another. When a file cannot be staged because its
name is taken (a file where a folder must go, or a folder where a file must), the
object is to blame only if its own storage holds both names (`x` and `x/y`); if an
earlier input put the file or folder there, the inputs' localPaths are, and the
message must say so rather than ask the user to rename an object that is fine.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from nightshift.runner.config import DataConfig
from nightshift.runner.storageerr import UnstageableKeyError


class Placed:
    """The files (and stream links) each input placed, by the input's index."""

    def __init__(self) -> None:
        self._by_input: dict[int, set[Path]] = {}

    def of(self, i: int) -> set[Path]:
        """Input i's set, for stage-in to add each file to as it lands (threads may add
        at once: a set's add is atomic under the GIL)."""
        return self._by_input.setdefault(i, set())

    def taken_by(self, i: int, error: OSError) -> tuple[int, Path] | None:
        """The earlier input whose file or folder stands where input i needed the
        other kind, and that path; None when no other input placed it."""
        if not error.filename:
            return None
        path = Path(os.fsdecode(error.filename))
        if error.errno == errno.EISDIR:
            # A folder where input i's file goes: whose files are in it?
            return next(((j, path) for j, ps in self._others(i)
                         if any(p.is_relative_to(path) for p in ps)), None)
        if error.errno == errno.EEXIST:
            taken: Path | None = path
        elif error.errno == errno.ENOTDIR:
            # mkdir of a/b/c where a (or a/b) is a file: the nearest existing ancestor.
            taken = next((p for p in path.parents if os.path.lexists(p)), None)
        else:
            return None  # a name too long is the object's own
        return next(((j, taken) for j, ps in self._others(i) if taken in ps), None)

    def _others(self, i: int) -> list[tuple[int, set[Path]]]:
        return [(j, ps) for j, ps in self._by_input.items() if j != i]


def unstageable(i: int, e: UnstageableKeyError, placed: Placed,
                inputs: list[DataConfig]) -> str:
    """What a key that cannot be staged as a file says: the two inputs when an earlier
    one took its place, the object's own fault otherwise."""
    found = placed.taken_by(i, e.error)
    if found is None:
        return str(e)
    j, taken = found
    return (f"object {e.key!r} cannot be staged at {e.error.filename}: inputs[{j}] "
            f"already placed {taken} there ({e.error.strerror}); the two inputs stage into "
            f"overlapping places under inputs/ (inputs[{j}].localPath "
            f"{inputs[j].local_path!r}, inputs[{i}].localPath {inputs[i].local_path!r}) and "
            "their names clash: give each input its own localPath")
