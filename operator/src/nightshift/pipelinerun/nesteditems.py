"""Items whose output prefixes nest: item `a` commits to `raw/a/`, item `a/b` to `raw/a/b/`.

Each item's commit owns its prefix: it aborts the multipart uploads left under it, and
a consumer that finds no `_SUCCESS` there reads the prefix as raw data. With nested
prefixes one item's commit reaches into another's (an attempt of `a` aborts `a/b`'s
uploads in flight; a gathered `a` that failed reads as `a/b`'s files), so such items
are refused, naming both items and the fix.

Two items' prefixes can also be the very same, from two outputs (`x/{item}/logs` for item
`a`, `x/{item}` for item `a/logs`). Range and matrix items are never checked here: a
format around a number, or values without '/' joined by one per field, give every item
the same depth. With one output and no '/' in any value the prefixes are distinct and
equally deep, so such a stage costs one scan of its values.
"""

from __future__ import annotations

from collections.abc import Sequence

from nightshift.api.itemfields import expand
from nightshift.api.problems import Problem
from nightshift.pipelinerun.spec import Stage

MAX_REPORTED = 5  # as check_items: the first few say enough
# Stand-ins for {item} and {index} in a template expanded once per output: no item
# holds a NUL (check_items refuses it), so filling them in is two plain replaces.
_ITEM, _INDEX = "\0item\0", "\0index\0"


def _template(template: str, run: str, stage: str) -> str:
    return expand(template, {"item": _ITEM, "index": _INDEX, "run": run, "stage": stage})


def _prefix(template: str, item: str, index: int) -> str:
    """The prefix the runner commits an output to (runner.config: fill_template, then
    as_prefix) for an item of a non-matrix stage, from _template's form."""
    path = template.replace(_INDEX, str(index)).replace(_ITEM, item)
    return path if not path or path.endswith("/") else path + "/"


def nested_items(path: str, values: Sequence[str], st: Stage, run: str) -> list[Problem]:
    """Items of `st` whose output prefix is another item's or lies inside it (same
    storage), as problems at `path[i]`. `values` are the stage's items in order, as
    check_items gets them (inline, or read by the I/O layer)."""
    if not st.outputs or (len(st.outputs) == 1 and not any("/" in v for v in values)):
        return []
    templates = [(out.storage, _template(out.path, run, st.name)) for out in st.outputs]
    # Sorted, every prefix's descendants follow it in one block: a stack of the prefixes
    # the current one may lie in finds each nesting in one pass (n log n, not n^2).
    commits = sorted((storage, _prefix(t, v, i), i, j)
                     for i, v in enumerate(values) for j, (storage, t) in enumerate(templates))
    clashes: list[tuple[tuple[int, int], tuple[int, int], str, bool]] = []
    open_: list[tuple[str, str, int, int]] = []
    for commit in commits:
        storage, prefix, i, j = commit
        while open_ and not (open_[-1][0] == storage and prefix.startswith(open_[-1][1])):
            open_.pop()
        # Outputs of one item that nest are outputs[].path's own check (runnerparts).
        outer = next((o for o in reversed(open_) if o[2] != i), None)
        if outer is not None:
            clashes.append(((i, j), (outer[2], outer[3]), prefix, prefix == outer[1]))
        open_.append(commit)
    # One problem per item (its first output that clashes), the first few items only.
    first: dict[int, tuple[tuple[int, int], tuple[int, int], str, bool]] = {}
    for clash in sorted(clashes):
        first.setdefault(clash[0][0], clash)
    problems = [_problem(path, values, st, *c) for c in list(first.values())[:MAX_REPORTED]]
    if len(first) > MAX_REPORTED:
        problems.append(Problem(path, f"{len(first) - MAX_REPORTED} more items have an "
                                "output prefix inside another item's", ratchet=True))
    return problems


def _problem(path: str, values: Sequence[str], st: Stage, inner: tuple[int, int],
             outer: tuple[int, int], prefix: str, same: bool) -> Problem:
    (i, j), (k, m) = inner, outer
    template = st.outputs[j].path
    return Problem(
        f"{path}[{i}]",
        f"{values[i][:60]!r} commits outputs[{j}] to {prefix[:120]!r}, "
        f"{'the same prefix as' if same else 'inside'} item {k} ({values[k][:60]!r})'s "
        f"outputs[{m}] prefix, so one item's commit would reach into the other's files; "
        "rename one item (e.g. without '/'), or end outputs"
        f"[{j}].path after {{item}} with a suffix of its own (e.g. "
        f"{template.rstrip('/') + '.d/'!r})",
        ratchet=True)
