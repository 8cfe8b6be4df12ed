"""The step wrapper dropped at /nightshift/bin/step: POSIX sh, shell builtins only.

User images promise /bin/sh and nothing else (no date, sleep or mv), so the script uses
only builtins: file mtimes carry the timestamps, a FIFO carries the commit result (a
blocking read instead of a sleep loop). Protocol with the commit sidecar, under the
state directory:

    steps/<step>.start        created when the step starts (mtime = start)
    steps/<step>.rc           the step's exit code (mtime = end)
    request                   "<step> <rc>" line: commit now (a step failed, or the last
                              step succeeded); the sidecar polls for it every second
    commit.fifo               the sidecar writes "ok", or "failed <why>" on one line, when the
                              commit is done

The script exits with the user's exit code so the Job's podFailurePolicy onExitCodes
rules see it; only when the user's last step succeeded and the commit failed does it
exit 75 (EX_TEMPFAIL), which Nightshift treats as retryable.
"""

from __future__ import annotations

import os
from pathlib import Path

from nightshift.api import names

EX_TEMPFAIL = names.EX_TEMPFAIL
FIFO = "commit.fifo"
REQUEST = "request"

TEMPLATE = r"""#!/bin/sh
# Nightshift step wrapper, written by `nightshift-runner stage-in`.
# Usage: step <step name> [--] command [args...]
state='@STATE@'
step="$1"
shift
[ "$1" = "--" ] && shift
: > "$state/steps/$step.start"
# Run the step as a child so SIGTERM (spot interruption, deletion) reaches it. Its
# stdin becomes /dev/null, which is what a pod's containers have anyway.
child=
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM
trap '[ -n "$child" ] && kill -INT "$child" 2>/dev/null' INT
"$@" &
child=$!
while :; do
  wait "$child"
  rc=$?
  # wait returns >128 when a trapped signal interrupted it; wait again for the child.
  if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi
  break
done
printf '%s\n' "$rc" > "$state/steps/$step.rc"
if [ "$rc" -ne 0 ] || [ "$step" = "${@LAST_STEP@:-}" ]; then
  printf '%s %s\n' "$step" "$rc" > "$state/request"
  result=
  read -r result < "$state/commit.fifo" || :
  if [ "$rc" -eq 0 ] && [ "$result" != ok ]; then
    why=${result#failed}
    [ -n "$why" ] || why=" see the commit container's log"
    printf 'nightshift: committing outputs failed:%s\n' "$why" >&2
    exit @TEMPFAIL@
  fi
fi
exit "$rc"
"""


def script(state_dir: Path) -> str:
    if "'" in str(state_dir):
        raise ValueError(f"state dir {state_dir} must not contain a single quote")
    return (TEMPLATE.replace("@STATE@", str(state_dir))
            .replace("@TEMPFAIL@", str(EX_TEMPFAIL))
            .replace("@LAST_STEP@", names.ENV_LAST_STEP))


def install(bin_dir: Path, state_dir: Path) -> Path:
    """Write bin/step and the state directory the script and the sidecar share."""
    (state_dir / "steps").mkdir(parents=True, exist_ok=True)
    fifo = state_dir / FIFO
    if not fifo.exists():
        os.mkfifo(fifo, 0o666)
    # Steps may run as another uid than the runner.
    for p in (state_dir, state_dir / "steps", fifo):
        os.chmod(p, 0o777 if p.is_dir() else 0o666)
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / Path(names.STEP_BINARY).name  # run.sh looks for it there
    tmp = bin_dir / ".step.tmp"
    tmp.write_text(script(state_dir))
    os.chmod(tmp, 0o755)  # noqa: S103  (bin/step: steps of any uid execute it; none write it)
    os.replace(tmp, path)
    return path
