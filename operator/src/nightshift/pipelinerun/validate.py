"""What the CRD's CEL rules cannot check (and a second look at what they can).

CEL has no recursion (cycles), cannot see items that live in ConfigMaps or S3, and
objects stored before a rule existed were never checked. Each problem names the field
path and the fix; the reconciler shows them in the Invalid condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nightshift.api.problems import Problem
from nightshift.pipelinerun import batch as batchmod
from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun import podvalues
from nightshift.pipelinerun import runnerparts as runner
from nightshift.pipelinerun.binding import BoundStorage
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_STAGE_NAME = 40
MAX_RUN_NAME = 63
# The Job API's limits for Indexed Jobs with backoffLimitPerIndex
# (k8s.io/kubernetes pkg/apis/batch/validation).
JOB_COMPLETIONS_SOFT_LIMIT = 100_000
JOB_HIGH_COMPLETIONS_LIMIT = 10_000
MAX_RETRIES = 100
INPUT_MODES = ("stage", "stream")
OUTPUT_MODES = ("batch", "interleave")
RESERVED_CONTAINER_PREFIX = "nightshift-"


def validate_spec(spec: PipelineRunSpec, run_name: str) -> list[Problem]:
    p: list[Problem] = []
    if len(run_name) > MAX_RUN_NAME or not DNS_LABEL.match(run_name):
        p.append(Problem("metadata.name", f"{run_name!r} must be a DNS label of at most "
                         f"{MAX_RUN_NAME} characters (it is a label value on every Job); "
                         "rename the run"))
    if not spec.stages:
        p.append(Problem("spec.stages", "is empty; add at least one stage"))
    storage = {s.name: s for s in spec.storage}
    p += _storage(spec)
    p += podvalues.spec_problems(spec)
    seen: dict[str, int] = {}
    for i, st in enumerate(spec.stages):
        path = f"spec.stages[{i}]"
        if st.name in seen:
            p.append(Problem(f"{path}.name", f"duplicates spec.stages[{seen[st.name]}].name "
                             f"{st.name!r}; give every stage its own name"))
        seen.setdefault(st.name, i)
        p += _stage(path, st, spec, storage)
        # The runner knows what it can stage in and commit; ask it, once per stage.
        known = {str(x) for x in p}
        for text in runner.runner_problems(st, storage, spec.archive, where=path):
            where, _, message = text.partition(": ")
            if str(Problem(where, message)) not in known:
                p.append(Problem(where, message))
    p += _dependencies(spec)
    for name, value in spec.parallelism.items():
        if name not in seen:
            p.append(Problem(f"spec.parallelism[{name}]", "names no stage; use a stage name "
                             f"({', '.join(seen) or 'none defined'})"))
        if value < 0:
            p.append(Problem(f"spec.parallelism[{name}]", "must be >= 0 (0 pauses the stage)"))
    if spec.launch.max_pods_per_minute is not None and spec.launch.max_pods_per_minute < 1:
        p.append(Problem("spec.launch.maxPodsPerMinute", "must be >= 1; omit it for no limit"))
    if spec.archive is not None and spec.archive.storage not in storage:
        p.append(Problem("spec.archive.storage", f"{spec.archive.storage!r} is not in "
                         "spec.storage; add it there or fix the name"))
    return p


def _storage(spec: PipelineRunSpec) -> list[Problem]:
    p: list[Problem] = []
    names: set[str] = set()
    for i, s in enumerate(spec.storage):
        if s.name in names:
            p.append(Problem(f"spec.storage[{i}].name", f"duplicate storage name {s.name!r}"))
        names.add(s.name)
        given = [s.s3, s.pvc, s.shared_storage]
        # A bound entry (binding.py) carries its SharedStorage's name and what it became.
        if sum(x is not None for x in given) != 1 and not isinstance(s, BoundStorage):
            p.append(Problem(f"spec.storage[{i}]", "set exactly one of s3, pvc or "
                             "sharedStorage"))
        p += podvalues.storage_problems(f"spec.storage[{i}]", s)
    return p


def _stage(path: str, st: Stage, spec: PipelineRunSpec,
           storage: Mapping[str, object]) -> list[Problem]:
    p: list[Problem] = []
    if len(st.name) > MAX_STAGE_NAME or not DNS_LABEL.match(st.name):
        p.append(Problem(f"{path}.name", f"{st.name!r} must be lower-case letters, digits and "
                         f"'-', at most {MAX_STAGE_NAME} characters"))
    p += _for_each(path, st)
    # What the API server would refuse in the stage's Job (its pod template).
    p += podvalues.stage_problems(path, st)
    if not st.steps:
        p.append(Problem(f"{path}.steps", "is empty; add at least one step with a command"))
    step_names: set[str] = set()
    for j, step in enumerate(st.steps):
        sp = f"{path}.steps[{j}]"
        if len(step.name) > 63 or not DNS_LABEL.match(step.name):
            p.append(Problem(f"{sp}.name", f"{step.name!r} must be a DNS label (it names a "
                             "container)"))
        if step.name.startswith(RESERVED_CONTAINER_PREFIX):
            p.append(Problem(f"{sp}.name", f"names starting with {RESERVED_CONTAINER_PREFIX!r} "
                             "are reserved for the runner; rename the step"))
        if step.name in step_names:
            p.append(Problem(f"{sp}.name", f"duplicate step name {step.name!r}"))
        step_names.add(step.name)
        if not step.command or any(c == "" for c in step.command[:1]):
            p.append(Problem(f"{sp}.command", "is empty; give the program to run"))
    if not 0 <= st.retries.per_item <= MAX_RETRIES:
        p.append(Problem(f"{path}.retries.perItem", f"must be between 0 and {MAX_RETRIES}"))
    codes = st.retries.permanent_exit_codes
    if any(not 1 <= c <= 255 for c in codes) or len(set(codes)) != len(codes):
        p.append(Problem(f"{path}.retries.permanentExitCodes",
                         "must be distinct exit codes from 1 to 255"))
    tol = st.tolerate_failed_items
    if tol is not None and tol < 0:
        p.append(Problem(f"{path}.tolerateFailedItems", "must be >= 0; omit it to run every "
                         "item and fail the stage at the end if any failed"))
    if st.parallelism is not None and st.parallelism < 0:
        p.append(Problem(f"{path}.parallelism", "must be >= 0"))
    p += _batch(path, st, spec)
    for kind, refs, modes in (("inputs", st.inputs, INPUT_MODES),
                              ("outputs", st.outputs, OUTPUT_MODES)):
        for j, ref in enumerate(refs):
            if ref.storage not in storage:
                p.append(Problem(f"{path}.{kind}[{j}].storage", f"{ref.storage!r} is not in "
                                 "spec.storage; add it there or fix the name"))
            if ref.mode is not None and ref.mode not in modes:
                p.append(Problem(f"{path}.{kind}[{j}].mode",
                                 f"{ref.mode!r} must be one of {', '.join(modes)}"))
    fe = st.for_each
    if fe is not None and fe.from_s3 is not None and fe.from_s3.storage not in storage:
        p.append(Problem(f"{path}.forEach.fromS3.storage", f"{fe.from_s3.storage!r} is not "
                         "in spec.storage; add it there or fix the name"))
    return p


def _batch(path: str, st: Stage, spec: PipelineRunSpec) -> list[Problem]:
    k = st.batch
    if not batchmod.DEFAULT <= k <= batchmod.MAX:
        return [Problem(f"{path}.batch", f"{k} must be between 1 (a pod per item) and "
                        f"{batchmod.MAX}")]
    if k == 1:
        return []
    if st.mpi is not None:
        return [Problem(f"{path}.batch", "an mpi stage runs one program once, there are no "
                        "items to batch: remove batch")]
    p: list[Problem] = []
    uses = [n for n, v in (("inputs", st.inputs), ("outputs", st.outputs),
                           ("spec.archive", spec.archive)) if v]
    if uses:
        p.append(Problem(f"{path}.batch", f"batch {k} with {', '.join(uses)}: the runner "
                         "stages, commits and records one item per pod, so batching is only "
                         "for stages without inputs, outputs and spec.archive for now; set "
                         "batch: 1, or read and write the storage from the steps themselves"))
    tol = st.tolerate_failed_items
    if tol is not None and tol % k:
        p.append(Problem(f"{path}.tolerateFailedItems", f"{tol} is not a multiple of batch "
                         f"({k}): a failed batch counts all its items as failed, so failures "
                         f"are tolerated in whole batches; use e.g. {tol // k * k} or "
                         f"{(tol // k + 1) * k}"))
    return p


def _for_each(path: str, st: Stage) -> list[Problem]:
    fe = st.for_each
    if fe is None:
        return []
    p: list[Problem] = []
    fp = f"{path}.forEach"
    sources = [n for n, v in (("items", fe.items), ("range", fe.range),
                              ("fromConfigMap", fe.from_config_map),
                              ("fromS3", fe.from_s3)) if v is not None]
    if len(sources) != 1:
        p.append(Problem(fp, f"sets {', '.join(sources) or 'no item source'}; set exactly "
                         "one of items, range, fromConfigMap, fromS3"))
        return p
    if fe.items is not None:
        p += check_items(f"{fp}.items", fe.items, st)
    elif fe.range is not None:
        r = fe.range
        if r.step < 1:
            p.append(Problem(f"{fp}.range.step", "must be >= 1"))
        if r.to < r.from_:
            p.append(Problem(f"{fp}.range.to", f"{r.to} is below from ({r.from_}); swap them"))
        problem = itemsmod.format_problem(r.format)
        if problem:
            p.append(Problem(f"{fp}.range.format", problem))
        if r.step >= 1 and r.to >= r.from_:
            p += check_count(f"{fp}.range", itemsmod.range_count(r.from_, r.to, r.step), st)
    return p


def check_items(path: str, values: list[str] | tuple[str, ...], st: Stage) -> list[Problem]:
    """Per-item checks, also for items the I/O layer read from a ConfigMap or S3."""
    p = check_count(path, len(values), st)
    bad = 0
    for i, v in enumerate(values):
        problem = itemsmod.item_problem(v)
        if problem:
            bad += 1
            if bad <= 5:  # the first few say enough; 10^5 lines of errors say nothing
                p.append(Problem(f"{path}[{i}]", f"{v[:60]!r} {problem}"))
    if bad > 5:
        p.append(Problem(path, f"{bad - 5} more items have the same kinds of problem"))
    return p


def check_count(path: str, count: int, st: Stage) -> list[Problem]:
    """Item-count limits, from the Job API's rules for Indexed Jobs."""
    tol = st.tolerate_failed_items
    if count == 0:
        return [Problem(path, "gives no items; a stage needs at least one (omit forEach "
                        "to run the stage once)")]
    if count > itemsmod.MAX_ITEMS:
        return [Problem(path, f"gives {count} items, above Nightshift's limit of "
                        f"{itemsmod.MAX_ITEMS}; split the stage")]
    p: list[Problem] = []
    # The Job API's limits are on completions: batches of items when batched.
    k = max(1, st.batch)
    if batchmod.completions(count, k) > JOB_COMPLETIONS_SOFT_LIMIT:
        if tol is None:
            p.append(Problem(path, f"gives {count} items; above {JOB_COMPLETIONS_SOFT_LIMIT} "
                             "the Job API requires a failed-item limit: set "
                             f"tolerateFailedItems (at most {JOB_HIGH_COMPLETIONS_LIMIT})"))
        elif tol // k > JOB_HIGH_COMPLETIONS_LIMIT:
            p.append(Problem(path, f"gives {count} items; above {JOB_COMPLETIONS_SOFT_LIMIT} "
                             f"tolerateFailedItems must be at most {JOB_HIGH_COMPLETIONS_LIMIT}"))
        if st.parallelism is not None and st.parallelism > JOB_HIGH_COMPLETIONS_LIMIT:
            p.append(Problem(path, f"gives {count} items; above {JOB_COMPLETIONS_SOFT_LIMIT} "
                             f"parallelism must be at most {JOB_HIGH_COMPLETIONS_LIMIT}"))
    return p


def _dependencies(spec: PipelineRunSpec) -> list[Problem]:
    p: list[Problem] = []
    index = {st.name: i for i, st in enumerate(spec.stages)}
    for i, st in enumerate(spec.stages):
        for j, dep in enumerate(st.depends_on):
            if dep not in index:
                p.append(Problem(f"spec.stages[{i}].dependsOn[{j}]", f"{dep!r} is not a stage "
                                 f"of this run; use one of {', '.join(index)}"))
            elif dep == st.name:
                p.append(Problem(f"spec.stages[{i}].dependsOn[{j}]", "a stage cannot depend "
                                 "on itself; remove it"))
    cycle = find_cycle({st.name: [d for d in st.depends_on if d in index and d != st.name]
                        for st in spec.stages})
    if cycle:
        first = index[cycle[0]]
        j = spec.stages[first].depends_on.index(cycle[1])
        p.append(Problem(f"spec.stages[{first}].dependsOn[{j}]", "dependency cycle "
                         f"{' -> '.join([*cycle, cycle[0]])}; remove one of these dependencies"))
    return p


def find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """One cycle of stage names (each depends on the next), or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, []):
            if state.get(m) == 1:
                return stack[stack.index(m):]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []
