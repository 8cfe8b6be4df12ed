"""Matrix fields and `{placeholder}` expansion: one rule in Python, the same in POSIX sh.

A forEach.matrix item is its field values joined by FIELD_SEP, fields in the order
names.ENV_ITEM_FIELDS lists them. run.sh (pipelinerun/items.py) splits the item with
SH_FIELDS and rebuilds the step's argv with SH_ARGV; the runner (paths) and the tests
use split_fields and expand. tests/unit/test_item_lookup.py and test_run_sh_argv.py run
both sides on the same items.

Expansion is a single left-to-right scan, never str.format nor repeated replace: a
value that itself holds "{index}" is never expanded again. At each "{" the text up to
the next "}" is a name; a known name is replaced, anything else ("{}", "{x}") stays
literal and the scan goes on right after that "{". Stdlib only (the runner image).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

from nightshift.api import names

FIELD_SEP = "/"
FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
# Placeholders with a meaning of their own: {item}, {index}, {gather} in argv or paths,
# {run} and {stage} in paths; and "fields", whose env var would be ENV_ITEM_FIELDS.
RESERVED_FIELDS = ("item", "index", "gather", "run", "stage", "fields")


class FieldsError(ValueError):
    """An item does not split into the stage's matrix fields."""


def field_env(field: str) -> str:
    """The env var run.sh exports a field's value in: NIGHTSHIFT_ITEM_SOURCE for source."""
    return names.ENV_ITEM_FIELD_PREFIX + field.upper()


def parse_fields(text: str) -> tuple[str, ...]:
    """The field names of names.ENV_ITEM_FIELDS ("" or unset: not a matrix stage)."""
    fields = tuple(text.split())
    bad = [f for f in fields if not FIELD_NAME.match(f)]
    if bad:
        raise FieldsError(f"{names.ENV_ITEM_FIELDS}: {bad[0]!r} is not a field name "
                          f"({FIELD_NAME.pattern})")
    return fields


def split_fields(value: str, fields: Sequence[str]) -> dict[str, str]:
    """{field: value} for a matrix item; {} when the stage has no matrix."""
    if not fields:
        return {}
    parts = value.split(FIELD_SEP)
    if len(parts) != len(fields):
        raise FieldsError(f"item {value!r} has {len(parts)} {FIELD_SEP!r}-separated parts, "
                          f"the matrix has {len(fields)} fields ({' '.join(fields)})")
    return dict(zip(fields, parts, strict=True))


def expand(text: str, values: Mapping[str, str]) -> str:
    """`text` with each {name} of `values` replaced, exactly as SH_ARGV's expand does."""
    out: list[str] = []
    i = 0
    while True:
        j = text.find("{", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k = text.find("}", j + 1)
        if k < 0:
            out.append(text[j:])
            break
        name = text[j + 1:k]
        if name in values:
            out.append(values[name])
            i = k + 1
        else:
            out.append("{")
            i = j + 1
    return "".join(out)


def argv_values(value: str, index: int, fields: Mapping[str, str]) -> dict[str, str]:
    """What a step's command and args may name: {item}, {index} and each field."""
    return {**fields, "item": value, "index": str(index)}


_UPPER = " ".join(f"{c}) uc={c.upper()};;" for c in string.ascii_lowercase)

# POSIX sh for run.sh, after SH_LOOKUP set $item. Exports each matrix field without
# eval: `export "NAME=value"` takes the value as data. Field names are checked again
# here because they become variable names; `set -f` (until SH_ARGV ends) keeps the
# unquoted field list from globbing. Exits 2 when the item does not split.
SH_FIELDS = f"""\
set -f
fields=${{{names.ENV_ITEM_FIELDS}-}}
upper() {{
  up= us=$1
  while [ -n "$us" ]; do
    ur=${{us#?}}; uc=${{us%"$ur"}}; us=$ur
    case $uc in {_UPPER} esac
    up=$up$uc
  done
}}
rest=$item{FIELD_SEP}
for f in $fields; do
  case $f in [!a-z]*|*[!a-z0-9_]*)
    echo "nightshift: {names.ENV_ITEM_FIELDS} holds $f, not a field name" >&2; exit 2;;
  esac
  if [ -z "$rest" ]; then
    echo "nightshift: item $item has fewer parts than the fields $fields" >&2; exit 2
  fi
  v=${{rest%%{FIELD_SEP}*}}
  rest=${{rest#*{FIELD_SEP}}}
  upper "$f"
  export "{names.ENV_ITEM_FIELD_PREFIX}$up=$v"
done
if [ -n "$fields" ] && [ -n "$rest" ]; then
  echo "nightshift: item $item has more parts than the fields $fields" >&2; exit 2
fi
"""

# POSIX sh for run.sh: {item}, {index} and each {<field>} replaced in every argument of
# "$@", which is rebuilt with `set --` (the for list is expanded once, before the loop),
# so each argument stays one argument whatever it holds. Needs $item, $orig, $fields.
SH_ARGV = """\
fieldval() {
  fr=$item/
  for ff in $fields; do
    fv=${fr%%/*}; fr=${fr#*/}
    if [ "$ff" = "$1" ]; then return 0; fi
  done
  return 1
}
expand() {
  ex= es=$1
  while :; do
    case $es in *"{"*) ;; *) ex=$ex$es; return 0;; esac
    ex=$ex${es%%"{"*}
    es=${es#*"{"}
    case $es in *"}"*) ;; *) ex="$ex{$es"; return 0;; esac
    en=${es%%"}"*}
    case $en in
      item) ex=$ex$item ;;
      index) ex=$ex$orig ;;
      *) if fieldval "$en"; then ex=$ex$fv; else ex="$ex{"; continue; fi ;;
    esac
    es=${es#*"}"}
  done
}
first=1
for a do
  if [ "$first" = 1 ]; then set --; first=; fi
  expand "$a"
  set -- "$@" "$ex"
done
set +f
"""
