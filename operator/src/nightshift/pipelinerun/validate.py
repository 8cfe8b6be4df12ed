"""What the CRD's CEL rules cannot check (and a second look at what they can).

CEL has no recursion (cycles), cannot see items that live in ConfigMaps or S3, and
objects stored before a rule existed were never checked. Each problem names the field
path and the fix; the reconciler shows them in the Invalid condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nightshift.api import buckets, itemfields
from nightshift.api.names import ENV_ITEM_FIELD_PREFIX
from nightshift.api.problems import Problem
from nightshift.pipelinerun import batch as batchmod
from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun import nesteditems, podvalues
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
# The most items a pod stages an input for (inputs[].gather): each is one listing.
MAX_GATHER = 10_000


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
        p += _stage(path, st, spec, storage, run_name)
        # The runner knows what it can stage in and commit; ask it, once per stage.
        known = {str(x) for x in p}
        for text in runner.runner_problems(st, storage, spec.archive, where=path):
            where, _, message = text.partition(": ")
            if str(Problem(where, message)) not in known:
                p.append(Problem(where, message))
        # Checked since 2026-11-30: a run started with such outputs goes on.
        for text in runner.output_overlaps(st, where=path):
            where, _, message = text.partition(": ")
            p.append(Problem(where, message, ratchet=True))
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
        if (s.s3 is not None and not isinstance(s, BoundStorage)
                and (bad := buckets.problem(f"spec.storage[{i}].s3.bucket", s.s3.bucket))):
            p.append(bad)
        if (s.s3 is not None and not isinstance(s, BoundStorage)
                and (bad := buckets.region_problem(f"spec.storage[{i}].s3.region",
                                                   s.s3.region))):
            p.append(bad)
    return p


def _stage(path: str, st: Stage, spec: PipelineRunSpec,
           storage: Mapping[str, object], run: str) -> list[Problem]:
    p: list[Problem] = []
    if len(st.name) > MAX_STAGE_NAME or not DNS_LABEL.match(st.name):
        p.append(Problem(f"{path}.name", f"{st.name!r} must be lower-case letters, digits and "
                         f"'-', at most {MAX_STAGE_NAME} characters"))
    p += _for_each(path, st, run)
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
    p += batchmod.problems(path, st, spec)
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
    if fe is not None and fe.from_file is not None and fe.from_file.storage not in storage:
        p.append(Problem(f"{path}.forEach.fromFile.storage", f"{fe.from_file.storage!r} is "
                         "not in spec.storage; add it there or fix the name"))
    return p + _gather(path, st, spec)


def _gather(path: str, st: Stage, spec: PipelineRunSpec) -> list[Problem]:
    """inputs[].gather names a stage this one (transitively) waits for; {gather} in its
    path iff it is set; never on outputs."""
    p: list[Problem] = []
    stages = {s.name: s for s in spec.stages}
    upstream = ancestors(spec, st.name)
    for j, ref in enumerate(st.outputs):
        fp = f"{path}.outputs[{j}]"
        if ref.gather is not None:
            p.append(Problem(f"{fp}.gather", "only inputs gather; remove it (an output is "
                             "per item: put {item} in its path)"))
        elif "{gather}" in ref.path:
            p.append(Problem(f"{fp}.path", f"{ref.path!r} has {{gather}}, which only a "
                             "gathering input has; use {item}"))
    for j, ref in enumerate(st.inputs):
        fp = f"{path}.inputs[{j}]"
        if ref.gather is None:
            if "{gather}" in ref.path:
                p.append(Problem(f"{fp}.path", f"{ref.path!r} has {{gather}} but no gather; "
                                 "set gather: <earlier stage> or remove {gather}"))
            continue
        g = ref.gather
        if "{gather}" not in ref.path:
            p.append(Problem(f"{fp}.path", f"{ref.path!r} has no {{gather}}; with gather: "
                             f"{g} each of {g}'s items goes where {{gather}} is, e.g. "
                             f"\"{g}/{{gather}}/\""))
        if g not in stages:
            p.append(Problem(f"{fp}.gather", f"{g!r} is not a stage of this run; use one of "
                             f"{', '.join(stages)}"))
            continue
        if g not in upstream:
            p.append(Problem(f"{fp}.gather", f"stage {st.name!r} does not depend on {g!r} "
                             "(directly or through other stages), so its items may not be "
                             f"there yet; add {g!r} to dependsOn"))
        count = static_count(stages[g])
        if count is not None and count > MAX_GATHER:
            p.append(Problem(f"{fp}.gather", f"stage {g!r} has {count} items; a pod gathers "
                             f"at most {MAX_GATHER} (split the gathering, e.g. per range)"))
    return p


def ancestors(spec: PipelineRunSpec, stage: str) -> set[str]:
    """Every stage `stage` waits for, directly or through others (cycles tolerated)."""
    deps = {s.name: s.depends_on for s in spec.stages}
    seen: set[str] = set()
    todo = list(deps.get(stage, []))
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo += deps.get(d, [])
    return seen


def static_count(st: Stage) -> int | None:
    """A stage's item count when the spec alone gives it; None for I/O sources."""
    fe = st.for_each
    if fe is None:
        return 1
    if fe.items is not None:
        return len(fe.items)
    if fe.range is not None:
        return itemsmod.range_count(fe.range.from_, fe.range.to, fe.range.step)
    if fe.matrix is not None:
        return itemsmod.matrix_count(fe.matrix)
    return None


def _for_each(path: str, st: Stage, run: str) -> list[Problem]:
    fe = st.for_each
    if fe is None:
        return []
    p: list[Problem] = []
    fp = f"{path}.forEach"
    sources = [n for n, v in (("items", fe.items), ("range", fe.range),
                              ("matrix", fe.matrix), ("fromConfigMap", fe.from_config_map),
                              ("fromS3", fe.from_s3), ("fromFile", fe.from_file))
               if v is not None]
    if len(sources) != 1:
        p.append(Problem(fp, f"sets {', '.join(sources) or 'no item source'}; set exactly "
                         "one of items, range, matrix, fromConfigMap, fromS3, fromFile"))
        return p
    if fe.matrix is not None:
        return p + matrix_problems(f"{fp}.matrix", fe.matrix, st)
    if fe.from_file is not None:
        path = fe.from_file.path
        if not path or path.startswith("/") or path.endswith("/"):
            p.append(Problem(f"{fp}.fromFile.path", f"{path!r} must name one object below "
                             "the storage's prefix, e.g. tables/images.txt (no leading or "
                             "trailing '/')"))
        return p
    if fe.items is not None:
        p += check_items(f"{fp}.items", fe.items, st, run)
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


def matrix_problems(path: str, matrix: Mapping[str, list[str]], st: Stage) -> list[Problem]:
    """Field names, values, and the product's size (computed, never expanded here)."""
    if not matrix:
        return [Problem(path, "has no fields; give at least one, e.g. site: [LAX, SF]")]
    p: list[Problem] = []
    for name, values in matrix.items():
        fp = f"{path}.{name}"
        if not itemfields.FIELD_NAME.match(name):
            p.append(Problem(fp, f"field name {name!r} must match "
                             f"{itemfields.FIELD_NAME.pattern} (it becomes "
                             f"{ENV_ITEM_FIELD_PREFIX}<NAME> and {{<name>}})"))
        elif name in itemfields.RESERVED_FIELDS:
            p.append(Problem(fp, f"{name!r} is reserved ({{{name}}} has its own meaning); "
                             "rename the field"))
        if not values:
            p.append(Problem(fp, "has no values; give at least one"))
        seen: set[str] = set()
        for i, v in enumerate(values):
            why = matrix_value_problem(v)
            if why is None and v in seen:
                why = "is listed twice; each value once"
            seen.add(v)
            if why:
                p.append(Problem(f"{fp}[{i}]", f"{v[:60]!r} {why}"))
    count = itemsmod.matrix_count(matrix)
    if count:
        p += check_count(path, count, st)
    longest = sum(max((len(v.encode()) for v in vs), default=0) for vs in matrix.values())
    longest += len(matrix) - 1
    if longest > itemsmod.MAX_ITEM_BYTES:
        p.append(Problem(path, f"the longest item (its longest values joined by "
                         f"{itemfields.FIELD_SEP!r}) has {longest} bytes, above "
                         f"{itemsmod.MAX_ITEM_BYTES}; shorten the values"))
    return p


def matrix_value_problem(value: str) -> str | None:
    if value == "":
        return "is empty; a value must name something"
    if value in (".", ".."):
        return "is a path step of its own ('.' or '..'); values name places in paths"
    bad = [c for c in (itemfields.FIELD_SEP, "\t", "\n", "\r", "\0") if c in value]
    if bad:
        return (f"contains {bad[0]!r}; matrix values may not contain '/' (it joins the "
                "fields of an item), tabs, line breaks or NUL")
    return None


def check_items(path: str, values: list[str] | tuple[str, ...], st: Stage, run: str
                ) -> list[Problem]:
    """Per-item checks, also for items the I/O layer read from a ConfigMap or S3; `run`
    is the run's name (output paths may hold {run})."""
    p = check_count(path, len(values), st)
    bad, more_repeats_only = 0, True
    first: dict[str, int] = {}
    for i, v in enumerate(values):
        problem, repeat = itemsmod.item_problem(v), False
        if problem is None and (j := first.setdefault(v, i)) != i:
            # Two pods would commit one item's outputs (and task record) to one place.
            problem = (f"repeats item {j}; list each item once (to run one several times, "
                       "use forEach.matrix with a field that numbers the repeats)")
            repeat = True  # refused since runs could start with repeats
        if problem:
            bad += 1
            if bad <= 5:  # the first few say enough; 10^5 lines of errors say nothing
                p.append(Problem(f"{path}[{i}]", f"{v[:60]!r} {problem}", ratchet=repeat))
            else:
                more_repeats_only = more_repeats_only and repeat
    if bad > 5:
        p.append(Problem(path, f"{bad - 5} more items have the same kinds of problem",
                         ratchet=more_repeats_only))
    return p + (nesteditems.nested_items(path, values, st, run) if bad == 0 else [])


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
