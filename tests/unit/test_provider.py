from __future__ import annotations

from nightshift.virtualcluster.provider import (
    CRD_EC2NODECLASS,
    CRD_KWOKNODECLASS,
    CRD_NODEPOOL,
    detect_provider,
)

AWS = {CRD_NODEPOOL, CRD_EC2NODECLASS}
KWOK = {CRD_NODEPOOL, CRD_KWOKNODECLASS}


def test_auto_detects_each_provider() -> None:
    assert detect_provider(AWS).provider == "aws"
    assert detect_provider(KWOK).provider == "kwok"
    # The local cluster installs the EC2NodeClass CRD too; KWOK's is what runs.
    assert detect_provider(AWS | KWOK).provider == "kwok"


def test_static_when_no_karpenter() -> None:
    for crds in (set(), {CRD_EC2NODECLASS}, {"foos.example.com"}):
        choice = detect_provider(crds)
        assert (choice.provider, choice.mode, choice.error) == ("static", "static", None)
        assert "nightshift.io/pool=<pool>" in choice.message


def test_override() -> None:
    assert detect_provider(AWS | KWOK, "aws").provider == "aws"
    assert detect_provider(AWS, "static").mode == "static"
    missing = detect_provider(KWOK, "aws")
    assert missing.provider == "aws"
    assert missing.error is not None and CRD_EC2NODECLASS in missing.error
    assert detect_provider(set(), "kwok").error is not None
