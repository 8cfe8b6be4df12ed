"""A `range` stage's item computed from the completion index: no items volume.

A first-attempt pod of a plain `range` stage whose steps name no placeholder needs
nothing from the items ConfigMaps: its item is `format` applied to
`from + index * step`, and its argv is the step's own. So its step runs a short inline
wrapper (`/bin/sh -c RANGE_SH ...`) instead of run.sh from the items volume, and the pod
carries no volume and no mount for it. Each of those fields is paid by the API server
and every watcher on each of the pod's writes (docs/performance.md).

The wrapper is short on purpose: a 1,240-byte version that also replaced `{item}` in
the argv cost KWOK's node agent more per pod write than the volume it saved (sets AG and
AH in docs/performance.md), so a step whose argv holds a `{` keeps run.sh. The wrapper's
inputs are arguments, never shell text: the stage's constants, the range's start and
stride, and the format split into a literal prefix, one printf conversion and a literal
suffix (only formats printf renders exactly as Python does; others keep the volume).
Retry Jobs, batched stages and stages with the runner or a FUSE wait keep run.sh and
the volume too: they need its lists or its other parts, and a retry's few pods do not
weigh on the fan-out. The items ConfigMaps are still frozen for every stage (retries,
`kubectl nightshift`, stages that gather these items).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass

from nightshift.api import names
from nightshift.pipelinerun.spec import RangeSource

# Python format spec → printf: an optional 0 flag, a width, and d (default), x, X or o.
_SPEC = re.compile(r"(0?)([1-9][0-9]?)?([dxXo]?)")
# sh's $0 for the wrapper (what `ps` shows); its nine parameters and a `--` follow.
ARGV0 = "nightshift-range"


@dataclass(frozen=True)
class RangeFormat:
    """A range format as printf renders it: `prefix`, then `conversion`, then `suffix`."""

    prefix: str
    conversion: str
    suffix: str

    def render(self, n: int) -> str:
        """What the wrapper prints for `n` (the tests hold it to Python's format)."""
        return self.prefix + (self.conversion % n) + self.suffix


def printf_format(fmt: str, from_: int) -> RangeFormat | None:
    """`fmt` as a prefix, printf conversion and suffix, when printf renders every item
    exactly as Python's str.format does; None otherwise (the stage keeps run.sh).

    x, X and o differ for negative numbers (printf prints two's complement), so they
    are taken only for a range that starts at 0 or above."""
    try:
        parts = list(string.Formatter().parse(fmt))
    except ValueError:
        return None
    fields = [i for i, p in enumerate(parts) if p[1] is not None]
    if len(fields) != 1:
        return None
    at = fields[0]
    _, name, spec, conversion = parts[at]
    if name not in ("", "0") or conversion is not None:
        return None
    m = _SPEC.fullmatch(spec or "")
    if m is None:
        return None
    zero, width, kind = m.groups()
    kind = kind or "d"
    if kind != "d" and from_ < 0:
        return None
    return RangeFormat(
        prefix="".join(p[0] for p in parts[: at + 1]),
        conversion=f"%{zero}{width or ''}{kind}",
        suffix="".join(p[0] for p in parts[at + 1:]),
    )


def inline_argv(r: RangeSource, argv: Iterable[str], *, run: str, stage: str,
                namespace: str, last_step: str) -> list[str] | None:
    """The wrapper's command up to its `--` (the step's argv follows), or None when the
    stage keeps run.sh: a `{` in any step's `argv` (a placeholder to replace, or text
    run.sh would read as one), or a format printf does not render the same."""
    if any("{" in a for a in argv):
        return None
    fmt = printf_format(r.format, r.from_)
    if fmt is None:
        return None
    return ["/bin/sh", "-c", RANGE_SH, ARGV0, run, stage, namespace, last_step,
            str(r.from_), str(r.step), fmt.prefix, fmt.conversion, fmt.suffix, "--"]


# POSIX sh, builtins only: 297 bytes (the backslashes join Python's lines, so the
# export is one line of sh). The same exports as run.sh for a range item, except
# NIGHTSHIFT_ITEMS_FILE (no items volume); then exec the step's argv as given.
RANGE_SH = f"""set -eu
i=${{{names.ENV_COMPLETION_INDEX}:?not an Indexed Job}}
export "{names.ENV_RUN}=$1" "{names.ENV_STAGE}=$2" "{names.ENV_NAMESPACE}=$3" \
"{names.ENV_LAST_STEP}=$4" "{names.ENV_ATTEMPT}=${{{names.ENV_ATTEMPT}:-0}}" \
"{names.ENV_ITEM_INDEX}=$i" "{names.ENV_ITEM}=$7$(printf "$8" $(($5+i*$6)))$9"
shift 10
exec "$@"
"""
