"""`nightshift validate` against the real API server: for every bad-input case, the
errors it prints are exactly the API server's (server-side dry run, strict field
validation: light, nothing is stored), and what the API server admits it admits too.

The API server's errors are read from the Status it returns (each cause's field and
message, as kubectl prints them) and compared as sorted lists: the API server walks
properties in Go map order.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config
from kubernetes.client.rest import ApiException

from nightshift.cli.main import main
from tests import bad_pipelineruns, bad_sharedstorages, bad_virtualclusters
from tests.integration.conftest import Cluster

pytest.importorskip("celpy")

TABLES = {"pipelinerun": bad_pipelineruns, "virtualcluster": bad_virtualclusters,
          "sharedstorage": bad_sharedstorages}
CASES = [(t, c[0], c[1], c[2]) for t, m in TABLES.items() for c in m.BAD]
PLURAL = {"PipelineRun": "pipelineruns", "VirtualCluster": "virtualclusters",
          "SharedStorage": "sharedstorages"}


class Api:
    """Raw calls, to read the API server's Status as it is."""

    def __init__(self, kubeconfig: str) -> None:
        self.client = config.new_client_from_config(config_file=kubeconfig)

    def call(self, method: str, path: str, body: Any = None,
             query: list[tuple[str, str]] | None = None) -> tuple[int, dict[str, Any]]:
        m, url, headers, payload, _ = self.client.param_serialize(
            method=method, resource_path=path, query_params=query or [],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"])
        try:
            resp = self.client.call_api(m, url, header_params=headers, body=payload,
                                        _request_timeout=30)
            return resp.status, json.loads(resp.read() or b"{}")
        except ApiException as e:
            return int(e.status), json.loads(e.body or "{}")


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[Api]:
    a = Api(cluster.kubeconfig)
    yield a
    a.client.close()


@pytest.fixture(scope="module")
def release(api: Api) -> str:
    """The API server's release, for `validate --kubernetes-version`: its wording of a
    failed CEL rule changed in 1.35, and this suite runs against any cluster."""
    status, body = api.call("GET", "/version")
    assert status == 200, body
    return f"{body['major']}.{body['minor'].rstrip('+')}"


def collection(obj: dict[str, Any]) -> str:
    group_version = obj["apiVersion"]
    namespace = obj["metadata"]["namespace"]
    return f"/apis/{group_version}/namespaces/{namespace}/{PLURAL[obj['kind']]}"


def api_server_errors(status: int, body: dict[str, Any]) -> list[str]:
    """The API server's errors as `nightshift validate` prints them; [] when admitted."""
    if status < 300:
        return []
    if body.get("reason") == "BadRequest" and "strict decoding error: " in body["message"]:
        return sorted(body["message"].split("strict decoding error: ", 1)[1].split(", "))
    causes = (body.get("details") or {}).get("causes") or []
    assert causes, f"refused without causes: {body.get('message')}"
    return sorted(f"{c.get('field', '<nil>')}: {c['message']}" for c in causes)


def validate_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], obj: dict[str, Any],
                    *flags: str) -> list[str]:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(obj))
    main(["validate", "-o", "json", *flags, str(path)])
    report = json.loads(capsys.readouterr().out)
    return sorted(f["text"] for f in report["objects"][0]["findings"]
                  if f["source"] == "admission")


def dry_run_create(api: Api, obj: dict[str, Any]) -> list[str]:
    """The API server's errors for creating `obj` (dry run, strict field validation)."""
    status, body = api.call("POST", collection(obj), obj,
                            [("dryRun", "All"), ("fieldValidation", "Strict")])
    return api_server_errors(status, body)


def dry_run_update(api: Api, base: dict[str, Any], change: dict[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Creates `base` (suspended: no operator starts anything), then sends it with
    `change` as a dry-run update: (the stored object, the update sent, the API server's
    errors for it). The operator may
    still write the new object (its finalizer, its status) between the two calls, so a
    conflict is retried on the object as it is then, as kubectl would."""
    base["spec"]["suspend"] = True
    status, stored = api.call("POST", collection(base), base)
    assert status < 300, stored
    where = f"{collection(base)}/{base['metadata']['name']}"
    for _ in range(5):
        changed = copy.deepcopy(stored)
        changed["spec"].update(change)
        status, body = api.call("PUT", where, changed, [("dryRun", "All")])
        if status != 409:
            return stored, changed, api_server_errors(status, body)
        status, stored = api.call("GET", where)
        assert status == 200, stored
    raise AssertionError(f"{where}: five conflicts in a row: {body.get('message')}")


def placed(manifest: dict[str, Any], namespace: str, name: str | None = None
           ) -> dict[str, Any]:
    m = copy.deepcopy(manifest)
    m["metadata"]["namespace"] = namespace
    for server_set in ("uid", "generation"):
        m["metadata"].pop(server_set, None)
    if name:
        m["metadata"]["name"] = name
    return m


@pytest.mark.parametrize(("table", "case", "manifest", "where"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_validate_says_what_the_api_server_says(
        table: str, case: str, manifest: dict[str, Any], where: str, api: Api,
        release: str, crds: list[str], namespace: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    obj = placed(manifest, namespace)
    theirs = dry_run_create(api, obj)
    mine = validate_errors(tmp_path, capsys, obj, "--kubernetes-version", release)
    assert mine == theirs
    # The table says where each case is caught: admission ("cel") or the operator.
    assert bool(theirs) == (where == "cel"), theirs


@pytest.mark.parametrize(("case", "base", "change", "text"), bad_pipelineruns.BAD_UPDATES,
                         ids=[c[0] for c in bad_pipelineruns.BAD_UPDATES])
def test_transition_rules_as_the_api_server(
        case: str, base: dict[str, Any], change: dict[str, Any], text: str, api: Api,
        release: str, crds: list[str], namespace: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stored, changed, theirs = dry_run_update(api, placed(base, namespace, f"upd-{case}"),
                                             change)
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(stored))
    mine = validate_errors(tmp_path, capsys, changed, "--old", str(old),
                           "--kubernetes-version", release)
    assert theirs and mine == theirs
    assert any(text in m for m in mine)


def test_unknown_fields_as_the_api_server(api: Api, crds: list[str], namespace: str,
                                          tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = bad_pipelineruns.run([bad_pipelineruns.stage("a", retry=3)], paralelism={"a": 1})
    obj = placed(run, namespace)
    assert dry_run_create(api, obj) == validate_errors(tmp_path, capsys, obj) == [
        'unknown field "spec.paralelism"', 'unknown field "spec.stages[0].retry"']


RECORD = os.environ.get("NIGHTSHIFT_RECORD_API_MESSAGES", "")


@pytest.mark.skipif(not RECORD, reason="records only with NIGHTSHIFT_RECORD_API_MESSAGES")
def test_record_the_api_servers_messages(api: Api, release: str, crds: list[str],
                                         namespace: str) -> None:
    """Writes this API server's errors for every "cel" case and every bad update to
    $NIGHTSHIFT_RECORD_API_MESSAGES (tests/api_messages/v<release>.json), which
    tests/unit/test_validate_releases.py holds `validate --kubernetes-version` to offline."""
    out: dict[str, Any] = {"release": release, "create": {}, "update": {}}
    for table, case, manifest, where in CASES:
        if where != "cel":
            continue
        out["create"].setdefault(table, {})[case] = dry_run_create(
            api, placed(manifest, namespace))
    for case, base, change, _ in bad_pipelineruns.BAD_UPDATES:
        out["update"][case] = dry_run_update(
            api, placed(base, namespace, f"rec-{case}"), change)[2]
    Path(RECORD).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
