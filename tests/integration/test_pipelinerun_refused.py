"""A Job the API server refuses fails the run at once (nothing else runs), naming the Job
(issue 14).

Every value Nightshift knows the API server refuses is caught before (the CRD, then
pipelinerun/podvalues.py: tests/bad_pipelinerun_pods.py); what remains is the cluster's
own policy. A ValidatingAdmissionPolicy bound to the test's namespace plays it here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nightshift.api import conditions as cond
from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import get_run, jobs, pipelinerun, stage, wait_phase

MESSAGE = "images named busybox:refused are not allowed in this namespace"


@pytest.fixture
def policy(kubectl: Kubectl, namespace: str) -> Iterator[str]:
    name = f"{namespace}-no-refused-image"
    kubectl.apply({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["batch"], "apiVersions": ["v1"],
                     "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]},
                 "validations": [{
                     "expression": "!object.spec.template.spec.containers.exists(c, "
                                   "c.image == 'busybox:refused')",
                     "message": MESSAGE, "reason": "Invalid"}]}})
    kubectl.apply({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": namespace}}}}})
    probe = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox:refused"}]}}}}

    def active() -> bool:
        r = kubectl("apply", "--dry-run=server", "-f", "-", input_=json.dumps(probe),
                    check=False)
        return r.returncode != 0 and MESSAGE in r.stderr

    wait_for("the admission policy to be in force", active, 60)
    yield name
    kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
    kubectl("delete", "validatingadmissionpolicy", name, check=False)


def test_a_job_the_api_server_refuses_fails_the_run_naming_it(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str, pool: str,
        policy: str) -> None:
    kubectl.apply(pipelinerun("refused", namespace,
                              [stage("a", pool, 3, image="busybox:refused")]))
    run = wait_phase(kube, namespace, "refused", {"Failed"}, 60)
    invalid: Any = cond.find(run["status"]["conditions"], cond.INVALID)
    assert invalid is not None and invalid["status"] == "True", run["status"]
    assert invalid["message"].startswith("Job refused-a-"), invalid["message"]
    assert "refused by the API server: 422 Invalid: " in invalid["message"]
    assert MESSAGE in invalid["message"]
    assert jobs(kube, namespace, "refused") == []
    # Finished is final: no retries of the refused write, the record stays.
    time.sleep(5)
    again = get_run(kube, namespace, "refused")["status"]
    assert again["phase"] == "Failed" and again["conditions"] == run["status"]["conditions"]
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json",
                                "--field-selector", "reason=Invalid").stdout)["items"]
    assert any(MESSAGE in e["message"] for e in events), "no Invalid event"
