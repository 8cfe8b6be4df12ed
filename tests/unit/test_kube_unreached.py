"""An API server not reached (connection refused or reset, a timeout, TLS) is an API
error like any other: KubeError status 0, retried by the engine, worded as such, and
never a failed pass where only an event was lost."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes import client

from nightshift.api.events import Event
from nightshift.engine.loop import describe
from nightshift.engine.passes import post_events
from nightshift.kube import Kube, KubeError


class ResetApi:
    """The client's transport, failing as a reset connection does."""

    def param_serialize(self, **kw: Any) -> tuple[str, str, dict[str, str], None, None]:
        return kw["method"], "https://api.example:443" + kw["resource_path"], {}, None, None

    def call_api(self, *_a: Any, **_kw: Any) -> Any:
        raise urllib3.exceptions.ProtocolError(
            "Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))


def test_a_refused_connection_is_a_kube_error_the_engine_retries() -> None:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:1"  # nothing listens on port 1
    kube = Kube(client.ApiClient(cfg), request_timeout=2)
    with pytest.raises(KubeError) as e:
        kube.get("v1", "ConfigMap", "x", "physics")
    assert e.value.status == 0 and e.value.transient
    assert describe(e.value).startswith(
        "the Kubernetes API could not be reached (GET /api/v1/namespaces/physics/"
        "configmaps/x): MaxRetryError: "), describe(e.value)


def test_an_event_lost_to_a_reset_connection_does_not_fail_the_pass(
        caplog: pytest.LogCaptureFixture) -> None:
    run = {"apiVersion": "nightshift.io/v1alpha1", "kind": "PipelineRun",
           "metadata": {"name": "nightly", "namespace": "physics", "uid": "u"}}
    with caplog.at_level(logging.WARNING, logger="nightshift"):
        post_events(Kube(ResetApi()), run, [Event("Normal", "RunSucceeded", "done")])
    assert "PipelineRun physics/nightly: event RunSucceeded not posted: 0 Unreachable: " \
        "the Kubernetes API could not be reached (POST /api/v1/namespaces/physics/" \
        "events): ProtocolError: " in caplog.text, caplog.text
