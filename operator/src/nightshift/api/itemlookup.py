"""The operator↔runner wire, its second half: which item a pod runs.

Item lookup. A stage's list is frozen in ConfigMap chunks whose keys are `items` (from
index 0) and `items.<start>` (from index <start>, zero-padded to CHUNK_DIGITS so that a
shell glob lists them in numeric order). A retry Job also mounts `indexes[.<start>]`:
line c is the original index of completion index c, which keeps each item's task record
and output keys stable across reruns. The pod's item is line `orig` of the items list,
where orig is line c of the indexes list when there is one, else c itself. `lookup` is
that rule in Python; SH_LOOKUP is the same rule in POSIX sh for run.sh, built from the
same constants, and tests/unit/test_item_lookup.py runs both on the same ConfigMaps.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nightshift.api import names
from nightshift.api.itemfields import FieldsError, split_fields
from nightshift.api.runnerwire import ConfigError

CHUNK_SEP = "."
CHUNK_DIGITS = 7  # room for any start index below 10**7 (MAX_ITEMS is far less)


def chunk_key(base: str, start: int) -> str:
    """The volume key of the chunk of list `base` that starts at index `start`."""
    return base if start == 0 else f"{base}{CHUNK_SEP}{start:0{CHUNK_DIGITS}d}"


def chunk_start(key: str, base: str) -> int | None:
    """The start index of chunk `key` of list `base`, or None when it is not one."""
    if key == base:
        return 0
    suffix = key[len(base) + len(CHUNK_SEP):]
    if key.startswith(base + CHUNK_SEP) and suffix.isdigit():
        return int(suffix)
    return None


class ItemsVolume(Protocol):
    """The mounted items volume, or anything that holds the same keys."""

    def listing(self) -> Iterable[str]: ...

    def lines(self, key: str) -> Iterator[str]:
        """The lines of `key` without their newline; only '\\n' ends a line (as in sed)."""
        ...


@dataclass(frozen=True)
class DirVolume:
    """The volume as the pod sees it: one file per key."""

    folder: Path

    def listing(self) -> Iterable[str]:
        return os.listdir(self.folder) if self.folder.is_dir() else []

    def lines(self, key: str) -> Iterator[str]:
        with (self.folder / key).open(encoding="utf-8", newline="\n") as fh:
            for raw in fh:
                yield raw.removesuffix("\n")

    def __str__(self) -> str:
        return str(self.folder)


@dataclass(frozen=True)
class DataVolume:
    """The merged `data` of the ConfigMaps a pod would mount (tests, tools)."""

    data: Mapping[str, str]

    def listing(self) -> Iterable[str]:
        return self.data.keys()

    def lines(self, key: str) -> Iterator[str]:
        text = self.data[key]
        yield from (text[:-1] if text.endswith("\n") else text).split("\n") if text else ()

    def __str__(self) -> str:
        return "the items ConfigMaps"


def nth_line(volume: ItemsVolume, base: str, n: int) -> str | None:
    """Line n (0-based) of list `base`, found in the chunk that holds it."""
    key, start = None, -1
    for k in volume.listing():
        s = chunk_start(k, base)
        if s is not None and start < s <= n:
            key, start = k, s
    if key is None:
        return None
    for i, line in enumerate(volume.lines(key)):
        if i == n - start:
            return line
    return None


def all_lines(volume: ItemsVolume, base: str = names.ITEMS_KEY) -> list[str]:
    """Every line of list `base`, its chunks in index order (a gathered stage's items)."""
    starts = sorted((s, k) for k in volume.listing()
                    if (s := chunk_start(k, base)) is not None)
    out: list[str] = []
    for start, key in starts:
        if start != len(out):
            raise ConfigError(f"{volume}: chunk {key} starts at {start}, but the chunks "
                              f"before it hold {len(out)} lines; a chunk ConfigMap is missing")
        out += volume.lines(key)
    return out


@dataclass(frozen=True)
class Item:
    value: str
    index: int  # the item's index in the stage's full list (stable across reruns)
    completion_index: int
    # forEach.matrix: (field, value) in the item's order; () for other sources.
    fields: tuple[tuple[str, str], ...] = ()


def with_fields(item: Item, fields: tuple[str, ...]) -> Item:
    """`item` split into its matrix fields, as run.sh's SH_FIELDS splits it."""
    try:
        values = split_fields(item.value, fields)
    except FieldsError as e:
        raise ConfigError(str(e)) from None
    return Item(item.value, item.index, item.completion_index, tuple(values.items()))


def lookup(volume: ItemsVolume, completion_index: int, base: str = names.ITEMS_KEY,
           fields: tuple[str, ...] = ()) -> Item:
    """The item of completion index `completion_index`, exactly as SH_LOOKUP finds it
    (and SH_FIELDS splits it, when the stage has matrix `fields`)."""
    ci = completion_index
    orig = ci
    if any(k == names.INDEXES_KEY for k in volume.listing()):
        text = nth_line(volume, names.INDEXES_KEY, ci)
        if text is None or not text.isdigit():
            raise ConfigError(f"{volume}: {names.INDEXES_KEY} has no index for completion "
                              f"index {ci}; the retry Job's indexes ConfigMaps are incomplete")
        orig = int(text)
    value = nth_line(volume, base, orig)
    # run.sh cannot tell an empty line from a missing one; items are never empty.
    if not value:
        raise ConfigError(f"{volume}: {base} has no line {orig} (completion index {ci}); "
                          "the Job has more completions than the stage has items")
    return with_fields(Item(value, orig, ci), fields)


# POSIX sh, builtins only but sed (with a `read` loop when sed is missing). Needs $dir
# (the items volume) and sets $idx, $orig and $item, or exits 2. The glob lists chunks
# in numeric order only because chunk_key pads starts to a fixed width.
SH_LOOKUP = f"""\
idx=${{{names.ENV_COMPLETION_INDEX}:?run.sh must run in a pod of an Indexed Job}}

# nth BASE N: line N (0-based) of the list kept in BASE, BASE.<start>, ... chunks.
nth() {{
  file=$dir/$1
  start=0
  for f in "$dir/$1"{CHUNK_SEP}*; do
    [ -e "$f" ] || continue
    s=${{f##*{CHUNK_SEP}}}
    while [ "${{s#0}}" != "$s" ] && [ -n "${{s#0}}" ]; do s=${{s#0}}; done
    [ "$s" -le "$2" ] || break
    file=$f
    start=$s
  done
  n=$(($2 - start + 1))
  if command -v sed >/dev/null 2>&1; then
    sed -n "${{n}}p;${{n}}q" "$file"
  else
    i=0
    while IFS= read -r line || [ -n "$line" ]; do
      i=$((i + 1))
      if [ "$i" -eq "$n" ]; then printf '%s\\n' "$line"; return 0; fi
    done < "$file"
  fi
}}

if [ -e "$dir/{names.INDEXES_KEY}" ]; then orig=$(nth {names.INDEXES_KEY} "$idx"); \
else orig=$idx; fi
item=
if [ -n "$orig" ]; then item=$(nth {names.ITEMS_KEY} "$orig"); fi
if [ -z "$item" ]; then
  echo "nightshift: no item for completion index $idx in $dir" >&2
  exit 2
fi
"""
