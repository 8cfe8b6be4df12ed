"""Bad PipelineRun inputs: (id, manifest, refused by "cel" | "invalid", substring).

"cel" cases are refused by the CRD's schema/CEL rules at admission (the lead runs them
against the real API server; the substring is from the API server's message).
"invalid" cases pass admission and get an Invalid condition from
nightshift.pipelinerun.validate whose message holds the substring. tests/unit/test_validate.py
also checks that every "cel" case is caught by the Python side (defence in depth for
objects stored before a rule existed).

BAD_UPDATES are (id, manifest, spec changes, substring): transition rules, refused by
the API server when the change is applied to the created manifest.
"""

from __future__ import annotations

import copy
from typing import Any

from tests import bad_pipelinerun_pods as pods


def stage(name: str = "s", **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "image": "busybox:1.36",
        "forEach": {"items": ["a", "b"]},
        "steps": [{"name": "main", "command": ["true"]}],
    }
    out.update(kw)
    return out


def mpi_stage(name: str = "s", **kw: Any) -> dict[str, Any]:
    """A stage that runs one MPI program (mpi, one step, no forEach)."""
    return {k: v for k, v in stage(name, mpi={"workers": 2}, **kw).items() if k != "forEach"}


def run(stages: list[dict[str, Any]] | None = None, name: str = "bad",
        **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nightshift.io/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": "physics"},
        "spec": {"stages": [stage()] if stages is None else stages, **spec},
    }


S3 = [{"name": "raw", "s3": {"bucket": "raw-data"}}]

BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("empty-stages", run([]), "cel", "should have at least 1 items"),
    ("duplicate-stage-names", run([stage("a"), stage("a")]), "cel",
     "stage names must be unique"),
    ("unknown-dependency", run([stage("a", dependsOn=["nope"])]), "cel",
     "every dependsOn entry must name a stage"),
    ("self-dependency", run([stage("a", dependsOn=["a"])]), "cel",
     "a stage cannot depend on itself"),
    ("both-items-and-range",
     run([stage(forEach={"items": ["x"], "range": {"from": 1, "to": 2}})]), "cel",
     "set exactly one of forEach.items"),
    ("no-item-source", run([stage(forEach={})]), "cel", "set exactly one of forEach.items"),
    ("negative-retries", run([stage(retries={"perItem": -1})]), "cel",
     "retries.perItem must be between 0 and 100"),
    ("too-many-retries", run([stage(retries={"perItem": 101})]), "cel",
     "retries.perItem must be between 0 and 100"),
    ("zero-exit-code", run([stage(retries={"permanentExitCodes": [0]})]), "cel",
     "should be greater than or equal to 1"),
    ("negative-tolerate", run([stage(tolerateFailedItems=-1)]), "cel",
     "tolerateFailedItems must be >= 0"),
    ("batch-zero", run([stage(batch=0)]), "cel", "should be greater than or equal to 1"),
    ("batch-too-large", run([stage(batch=1001)]), "cel",
     "should be less than or equal to 1000"),
    ("batch-with-mpi", run([mpi_stage(batch=10)]), "cel",
     "an mpi stage runs one program once, there are no items to batch"),
    ("parallelism-on-mpi", run([mpi_stage(parallelism=2)]), "cel",
     "an mpi stage has no parallelism"),
    ("spec-parallelism-names-mpi", run([mpi_stage("m")], parallelism={"m": 0}), "cel",
     "spec.parallelism cannot name an mpi stage"),
    ("batch-with-outputs",
     run([stage(batch=10, outputs=[{"storage": "raw", "path": "out/{item}/"}])], storage=S3),
     "invalid", "batching is only for stages without inputs, outputs and spec.archive"),
    ("batch-with-archive", run([stage(batch=10)], storage=S3, archive={"storage": "raw"}),
     "invalid", "batch 10 with spec.archive"),
    ("batch-tolerate-not-whole-batches", run([stage(batch=10, tolerateFailedItems=5)]),
     "invalid", "5 is not a multiple of batch (10)"),
    ("range-backwards", run([stage(forEach={"range": {"from": 5, "to": 1}})]), "cel",
     "range.to must be >= range.from"),
    ("range-step-zero", run([stage(forEach={"range": {"from": 1, "to": 5, "step": 0}})]),
     "cel", "range.step must be >= 1"),
    ("stage-name-too-long", run([stage("s" * 41)]), "cel", "Too long"),
    ("stage-name-not-dns", run([stage("Bad_Name")]), "cel", "should match"),
    ("run-name-too-long", run(name="r" * 64), "cel",
     "the run's name must be at most 63 characters"),
    ("empty-steps", run([stage(steps=[])]), "cel", "should have at least 1 items"),
    ("empty-command", run([stage(steps=[{"name": "main", "command": [""]}])]), "cel",
     "command[0] must name a program"),
    ("duplicate-step-names",
     run([stage(steps=[{"name": "x", "command": ["a"]}, {"name": "x", "command": ["b"]}])]),
     "cel", "step names must be unique"),
    ("bad-input-mode",
     run([stage(inputs=[{"storage": "raw", "path": "{item}", "mode": "batch"}])], storage=S3),
     "cel", "inputs[].mode must be stage or stream"),
    ("bad-output-mode",
     run([stage(outputs=[{"storage": "raw", "path": "{item}", "mode": "stream"}])],
         storage=S3),
     "cel", "outputs[].mode must be batch or interleave"),
    ("unknown-input-storage", run([stage(inputs=[{"storage": "nope", "path": "x"}])]),
     "cel", "inputs[].storage must name an entry of spec.storage"),
    ("unknown-s3-source-storage",
     run([stage(forEach={"fromS3": {"storage": "nope"}})], storage=S3), "cel",
     "fromS3.storage must name an entry of spec.storage"),
    ("unknown-archive-storage", run(archive={"storage": "nope"}, storage=S3), "cel",
     "spec.archive.storage must name an entry of spec.storage"),
    ("storage-s3-and-pvc",
     run(storage=[{"name": "x", "s3": {"bucket": "raw-data"}, "pvc": {"claimName": "c"}}]),
     "cel", "set exactly one of s3, pvc or sharedStorage"),
    ("s3-bucket-url", run(storage=[{"name": "raw", "s3": {"bucket": "s3://raw-data/nights"}}]),
     "cel", "not an s3:// URL or a path: put the key path in prefix"),
    ("s3-region-underscores",
     run(storage=[{"name": "raw", "s3": {"bucket": "raw-data", "region": "us_west_2"}}]),
     "cel", "must be a region name such as us-west-2"),
    ("parallelism-unknown-stage", run(parallelism={"nope": 3}), "cel",
     "every key of spec.parallelism must be the name of a stage"),
    # --- what CEL cannot see -------------------------------------------------------
    ("cyclic-dependencies",
     run([stage("a", dependsOn=["c"]), stage("b", dependsOn=["a"]),
          stage("c", dependsOn=["b"])]),
     "invalid", "dependency cycle"),
    ("zero-items", run([stage(forEach={"items": []})]), "invalid", "gives no items"),
    ("repeated-item", run([stage(forEach={"items": ["m31", "m42", "m31"]})]), "invalid",
     "spec.stages[0].forEach.items[2]: 'm31' repeats item 0; list each item once"),
    ("nested-item-outputs",
     run([stage(forEach={"items": ["m31", "m31/core"]},
                outputs=[{"storage": "raw", "path": "out/{item}"}])], storage=S3),
     "invalid", "spec.stages[0].forEach.items[1]: 'm31/core' commits outputs[0] to "
     "'out/m31/core/', inside item 0 ('m31')'s outputs[0] prefix"),
    ("100001-items-without-tolerate",
     run([stage(forEach={"range": {"from": 0, "to": 100_000}})]), "invalid",
     "set tolerateFailedItems"),
    ("100001-items-tolerate-too-high",
     run([stage(forEach={"range": {"from": 0, "to": 100_000}},
                tolerateFailedItems=20_000)]),
     "invalid", "tolerateFailedItems must be at most 10000"),
    ("too-many-items",
     run([stage(forEach={"range": {"from": 0, "to": 600_000}}, tolerateFailedItems=10)]),
     "invalid", "above Nightshift's limit"),
    ("newline-in-item", run([stage(forEach={"items": ["ok", "two\nlines"]})]), "invalid",
     "contains a line break"),
    ("empty-item", run([stage(forEach={"items": ["ok", ""]})]), "invalid", "is empty"),
    ("format-two-fields",
     run([stage(forEach={"range": {"from": 1, "to": 3, "format": "{}-{}"}})]), "invalid",
     "exactly one positional field"),
    ("format-named-field",
     run([stage(forEach={"range": {"from": 1, "to": 3, "format": "n-{night}"}})]),
     "invalid", "exactly one positional field"),
    ("format-not-for-ints",
     run([stage(forEach={"range": {"from": 1, "to": 3, "format": "{:s}"}})]), "invalid",
     "cannot format an integer"),
    ("format-unbalanced",
     run([stage(forEach={"range": {"from": 1, "to": 3, "format": "night-{"}})]), "invalid",
     "does not parse"),
    ("reserved-step-name",
     run([stage(steps=[{"name": "nightshift-stage-in", "command": ["x"]}])]), "cel",
     "reserved for the runner"),
    # --- #12: matrix, fromFile, gather ---------------------------------------------
    ("matrix-bad-field-name", run([stage(forEach={"matrix": {"Site": ["LAX"]}})]), "cel",
     "matrix field names must match"),
    ("matrix-reserved-field", run([stage(forEach={"matrix": {"index": ["1"]}})]), "cel",
     "are reserved"),
    ("matrix-dot-value", run([stage(forEach={"matrix": {"site": ["LAX", ".."]}})]), "cel",
     "should match"),
    ("matrix-value-with-slash", run([stage(forEach={"matrix": {"site": ["a/b"]}})]),
     "cel", "should match"),
    ("unknown-file-source-storage",
     run([stage(forEach={"fromFile": {"storage": "nope", "path": "t.txt"}})], storage=S3),
     "cel", "fromFile.storage must name an entry of spec.storage"),
    ("unknown-gather-stage",
     run([stage(inputs=[{"storage": "raw", "path": "x/{gather}/", "gather": "nope"}])],
         storage=S3), "cel", "gather must name another stage"),
    ("gather-without-placeholder",
     run([stage("a"), stage("b", dependsOn=["a"],
                            inputs=[{"storage": "raw", "path": "x/", "gather": "a"}])],
         storage=S3), "cel", "{gather} in its path exactly when"),
    ("gather-on-output",
     run([stage("a"), stage("b", dependsOn=["a"], outputs=[
         {"storage": "raw", "path": "o/{item}/{gather}/", "gather": "a"}])], storage=S3),
     "cel", "only inputs gather"),
    ("matrix-too-many-items",
     run([stage(forEach={"matrix": {"a": [str(i) for i in range(1000)],
                                    "b": [str(i) for i in range(1000)]}},
                tolerateFailedItems=10)]), "invalid", "above Nightshift's limit"),
    ("gather-not-a-dependency",
     run([stage("a"), stage("c"), stage("b", dependsOn=["c"], inputs=[
         {"storage": "raw", "path": "x/{gather}/", "gather": "a"}])], storage=S3),
     "invalid", "does not depend on 'a'"),
    ("gather-too-many-items",
     run([stage("a", forEach={"range": {"from": 0, "to": 10_000}}),
          stage("b", dependsOn=["a"], inputs=[
              {"storage": "raw", "path": "x/{gather}/", "gather": "a"}])], storage=S3),
     "invalid", "gathers at most 10000"),
]


# The API server's exact errors for each "cel" case (Kubernetes v1.34, server-side dry
# run; each is a Status cause's field and message, as kubectl prints them), in sorted
# order since the API server's order is not fixed. `nightshift validate` must print
# exactly these (tests/unit/test_validate_cli.py); tests/integration/
# test_validate_parity.py compares both with a live API server.
# The CRD's pattern for one matrix value (crds/pipelinerun.yaml), as messages quote it.
MATRIX_VALUE = ("^([^./\\t\\n\\r][^/\\t\\n\\r]*|\\.[^./\\t\\n\\r][^/\\t\\n\\r]*|"
                "\\.\\.[^/\\t\\n\\r]+)$")
API_SERVER_MESSAGES: dict[str, list[str]] = {
    "empty-stages": [
        "spec.stages: Invalid value: 0: spec.stages in body should have at least 1 items",
    ],
    "duplicate-stage-names": [
        'spec.stages: Invalid value: "array": stage names must be unique',
    ],
    "unknown-dependency": [
        'spec.stages: Invalid value: "array": every dependsOn entry must name a stage of this '
        "run",
    ],
    "self-dependency": [
        'spec.stages: Invalid value: "array": a stage cannot depend on itself',
    ],
    "both-items-and-range": [
        'spec.stages[0].forEach: Invalid value: "object": set exactly one of forEach.items, '
        "forEach.range, forEach.matrix, forEach.fromConfigMap, forEach.fromS3, "
        "forEach.fromFile",
    ],
    "no-item-source": [
        'spec.stages[0].forEach: Invalid value: "object": set exactly one of forEach.items, '
        "forEach.range, forEach.matrix, forEach.fromConfigMap, forEach.fromS3, "
        "forEach.fromFile",
    ],
    "negative-retries": [
        'spec.stages[0].retries: Invalid value: "object": retries.perItem must be between 0 and '
        "100",
    ],
    "too-many-retries": [
        'spec.stages[0].retries: Invalid value: "object": retries.perItem must be between 0 and '
        "100",
    ],
    "zero-exit-code": [
        "spec.stages[0].retries.permanentExitCodes[0]: Invalid value: 0: "
        "spec.stages[0].retries.permanentExitCodes[0] in body should be greater than or equal "
        "to 1",
    ],
    "batch-zero": [
        "spec.stages[0].batch: Invalid value: 0: spec.stages[0].batch in body should be "
        "greater than or equal to 1",
    ],
    "batch-too-large": [
        "spec.stages[0].batch: Invalid value: 1001: spec.stages[0].batch in body should be "
        "less than or equal to 1000",
    ],
    "batch-with-mpi": [
        'spec.stages[0]: Invalid value: "object": an mpi stage runs one program once, there '
        "are no items to batch: remove batch",
    ],
    "parallelism-on-mpi": [
        'spec.stages[0]: Invalid value: "object": an mpi stage has no parallelism, its MPIJob '
        "starts all mpi.workers at once: remove parallelism (spec.suspend pauses it)",
    ],
    "spec-parallelism-names-mpi": [
        'spec: Invalid value: "object": spec.parallelism cannot name an mpi stage, its MPIJob '
        "starts all mpi.workers at once: remove the key (spec.suspend pauses it)",
    ],
    "negative-tolerate": [
        'spec.stages[0]: Invalid value: "object": tolerateFailedItems must be >= 0; omit it to '
        "run every item and fail the stage at the end if any failed",
    ],
    "range-backwards": [
        'spec.stages[0].forEach.range: Invalid value: "object": range.to must be >= range.from',
    ],
    "range-step-zero": [
        'spec.stages[0].forEach.range: Invalid value: "object": range.step must be >= 1',
    ],
    "stage-name-too-long": [
        "<nil>: Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation",
        "spec.stages[0].name: Too long: may not be more than 40 bytes",
    ],
    "stage-name-not-dns": [
        'spec.stages[0].name: Invalid value: "Bad_Name": spec.stages[0].name in body should '
        "match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    ],
    "run-name-too-long": [
        "<nil>: Invalid value: \"object\": the run's name must be at most 63 characters (it is "
        "a label value on every Job and pod)",
    ],
    "empty-steps": [
        "spec.stages[0].steps: Invalid value: 0: spec.stages[0].steps in body should have at "
        "least 1 items",
    ],
    "empty-command": [
        'spec.stages[0].steps[0].command: Invalid value: "array": command[0] must name a '
        "program",
    ],
    "duplicate-step-names": [
        'spec.stages[0].steps: Invalid value: "array": step names must be unique within a stage',
    ],
    "bad-input-mode": [
        'spec.stages[0]: Invalid value: "object": inputs[].mode must be stage or stream',
    ],
    "bad-output-mode": [
        'spec.stages[0]: Invalid value: "object": outputs[].mode must be batch or interleave',
    ],
    "unknown-input-storage": [
        'spec: Invalid value: "object": every stages[].inputs[].storage must name an entry of '
        "spec.storage",
    ],
    "unknown-s3-source-storage": [
        'spec: Invalid value: "object": every stages[].forEach.fromS3.storage must name an '
        "entry of spec.storage",
    ],
    "unknown-archive-storage": [
        'spec: Invalid value: "object": spec.archive.storage must name an entry of spec.storage',
    ],
    "storage-s3-and-pvc": [
        'spec.storage[0]: Invalid value: "object": set exactly one of s3, pvc or sharedStorage',
    ],
    "s3-bucket-url": [
        'spec.storage[0].s3.bucket: Invalid value: "string": must be a bucket name alone, '
        "not an s3:// URL or a path: put the key path in prefix",
    ],
    "s3-region-underscores": [
        'spec.storage[0].s3.region: Invalid value: "string": must be a region name such as '
        "us-west-2: letters, digits and '-', not all digits, no '-' at either end",
    ],
    "parallelism-unknown-stage": [
        'spec: Invalid value: "object": every key of spec.parallelism must be the name of a '
        "stage",
    ],
    "reserved-step-name": [
        'spec.stages[0].steps[0].name: Invalid value: "string": step names starting with '
        "'nightshift-' are reserved for the runner's containers; rename the step",
    ],
    # #12 (matrix, fromFile, gather): written from the rules' messages in the format of
    # the cases above; not yet compared with a live API server.
    "matrix-bad-field-name": [
        'spec.stages[0].forEach.matrix: Invalid value: "object": matrix field names must '
        "match ^[a-z][a-z0-9_]{0,30}$",
    ],
    "matrix-reserved-field": [
        'spec.stages[0].forEach.matrix: Invalid value: "object": item, index, gather, run, '
        "stage and fields are reserved, not matrix field names",
    ],
    "matrix-dot-value": [
        'spec.stages[0].forEach.matrix.site[1]: Invalid value: "..": '
        f"spec.stages[0].forEach.matrix.site[1] in body should match '{MATRIX_VALUE}'",
    ],
    "matrix-value-with-slash": [
        'spec.stages[0].forEach.matrix.site[0]: Invalid value: "a/b": '
        f"spec.stages[0].forEach.matrix.site[0] in body should match '{MATRIX_VALUE}'",
    ],
    "unknown-file-source-storage": [
        'spec: Invalid value: "object": every stages[].forEach.fromFile.storage must name '
        "an entry of spec.storage",
    ],
    "unknown-gather-stage": [
        'spec: Invalid value: "object": every stages[].inputs[].gather must name another '
        "stage of this run (one the stage depends on)",
    ],
    "gather-without-placeholder": [
        'spec.stages[1]: Invalid value: "object": an input has {gather} in its path exactly '
        "when it sets gather",
    ],
    "gather-on-output": [
        'spec.stages[1]: Invalid value: "object": only inputs gather; outputs[] may not set '
        "gather nor use {gather}",
    ],
}

# "cel" cases the operator does not make Invalid: a run stored before the rule (its
# value was always ignored there) must not fail on an operator upgrade.
CEL_ONLY = {"parallelism-on-mpi", "spec-parallelism-names-mpi"}

# Values that land in a stage Job's pod, one case per class (issue 14).
BAD += pods.BAD
API_SERVER_MESSAGES.update(pods.API_SERVER_MESSAGES)

def updated(manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    out["spec"].update(spec)
    return out


BASE = run([stage("a"), stage("b", dependsOn=["a"])], storage=S3)

BAD_UPDATES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("stages-immutable", BASE, {"stages": [stage("a")]}, "spec.stages is immutable"),
    ("storage-immutable", BASE, {"storage": []}, "spec.storage is immutable"),
    ("archive-added", BASE, {"archive": {"storage": "raw"}}, "spec.archive is immutable"),
    ("rerun-decreases", updated(BASE, rerunFailed=2), {"rerunFailed": 1},
     "spec.rerunFailed can only grow"),
    ("uncancel", updated(BASE, cancel=True), {"cancel": False},
     "spec.cancel cannot be unset once true"),
    ("runner-image-changed", BASE, {"runnerImage": "example.org/runner:2"},
     "spec.runnerImage is immutable"),
    ("node-cache-changed", updated(BASE, nodeCache=False), {"nodeCache": True},
     "spec.nodeCache is immutable"),
    ("process-sampling-added", BASE, {"processSampling": True},
     "spec.processSampling is immutable"),
    ("parallelism-names-mpi", run([mpi_stage("m")]), {"parallelism": {"m": 0}},
     "spec.parallelism cannot name an mpi stage"),
]

# Changes that must be accepted on a created run (the mutable knobs).
GOOD_UPDATES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("parallelism", BASE, {"parallelism": {"a": 5}}),
    ("suspend", BASE, {"suspend": True}),
    ("cancel", BASE, {"cancel": True}),
    ("rerun", BASE, {"rerunFailed": 1}),
    ("launch", BASE, {"launch": {"maxPodsPerMinute": 60}}),
]

# The same for BAD_UPDATES (the change applied to the created run).
API_SERVER_UPDATE_MESSAGES: dict[str, list[str]] = {
    "stages-immutable": [
        'spec: Invalid value: "object": spec.stages is immutable after creation; change a '
        "stage's parallelism with spec.parallelism.<stage>, or create a new run",
    ],
    "storage-immutable": [
        'spec: Invalid value: "object": spec.storage is immutable after creation',
    ],
    "archive-added": [
        'spec: Invalid value: "object": spec.archive is immutable after creation',
    ],
    "rerun-decreases": [
        'spec: Invalid value: "object": spec.rerunFailed can only grow; bump it by one to rerun '
        "the failed items",
    ],
    "uncancel": [
        'spec: Invalid value: "object": spec.cancel cannot be unset once true; a cancelled run '
        "is final, create a new run",
    ],
    "parallelism-names-mpi": [
        'spec: Invalid value: "object": spec.parallelism cannot name an mpi stage, its MPIJob '
        "starts all mpi.workers at once: remove the key (spec.suspend pauses it)",
    ],
    **{case: [f'spec: Invalid value: "object": spec.{field} is immutable after creation (it '
              "would reach only the stages started later); create a new run"]
       for case, field in (("runner-image-changed", "runnerImage"),
                           ("node-cache-changed", "nodeCache"),
                           ("process-sampling-added", "processSampling"))},
}
