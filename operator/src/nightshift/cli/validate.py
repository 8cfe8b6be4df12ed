"""`nightshift validate FILE...`: the API server's and the operator's verdict on
Nightshift manifests, offline (pre-commit, CI). docs/validate.md describes it.

Each PipelineRun, VirtualCluster and SharedStorage in the files is checked as the API
server would check a create (schema, CEL rules; nightshift.admission) and, once
admitted, as the operator would (the kind's spec model and validate module;
nightshift.admission.operatorside). Messages are theirs, prefixed by
`file:document-index:Kind/name:` (documents count from 0). Other kinds are skipped.
Exit 0 when nothing is wrong, 1 when anything is (or a file cannot be read).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

GROUP = "nightshift.io"
SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class Finding:
    # "parse" (the file), "admission" (the API server) or "operator" (Invalid condition)
    source: str
    text: str


@dataclass
class Checked:
    file: str
    doc: int
    kind: str
    name: str
    namespace: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        what = f"{self.kind}/{self.name}" if self.kind else "?"
        return f"{self.file}:{self.doc}:{what}"


def add_command(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "validate", help="check Nightshift manifests offline, as the API server and the "
        "operator would", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="YAML/JSON files (multi-document), directories (their *.yaml, "
                   "*.yml, *.json), or - for standard input")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("-n", "--namespace", default="default",
                   help="namespace of objects that name none (default: default)")
    p.add_argument("--old", action="append", default=[], metavar="FILE",
                   help="the objects as they are now (e.g. the main branch's manifests): "
                   "objects found there are checked as updates, transition rules included")
    p.add_argument("--provider", choices=("aws", "kwok", "static"), default="aws",
                   help="the provider the operator would detect for VirtualClusters with "
                   "provider: auto (default: aws, as on EKS)")
    p.add_argument("--instance-catalog", metavar="FILE",
                   default=os.environ.get("NIGHTSHIFT_INSTANCE_CATALOG", ""),
                   help="instance types known (the KWOK provider's instance_types.json; "
                   "default $NIGHTSHIFT_INSTANCE_CATALOG); without it types are not checked")
    p.add_argument("--storage-class", action="append", default=None, metavar="NAME",
                   help="a StorageClass of the target cluster (repeatable); StorageClass "
                   "objects among the files count too")
    p.add_argument("--default-storage-class", metavar="NAME")
    p.add_argument("--cluster-cidr", action="append", default=[], metavar="CIDR",
                   help="the cluster's pod and node ranges (repeatable)")
    p.add_argument("--kubernetes-version", type=kubernetes_minor, default=None,
                   metavar="1.N", help="word admission errors as this release's API server "
                   "does (e.g. 1.34 or v1.37.2; from 1.35 a failed CEL rule shows the value, "
                   "not the type); default: the newest")
    p.set_defaults(run_validate=run)


def kubernetes_minor(text: str) -> int:
    """1.34, v1.37.2 -> 34, 37 (argparse names the flag in the error)."""
    parts = text.strip().removeprefix("v").split(".")
    if len(parts) < 2 or parts[0] != "1" or not parts[1].isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kubernetes release: write 1.N or v1.N.P, e.g. 1.34 or v1.37.2")
    return int(parts[1])


def _expand(paths: Sequence[str]) -> Iterator[str]:
    """Each file named, and each manifest file under a directory named. A directory with
    none yields itself, so that reading it says so (a mistyped or empty directory must
    not pass as "0 problems")."""
    for p in paths:
        path = Path(p)
        if p != "-" and path.is_dir():
            found = sorted(str(f) for f in path.rglob("*")
                           if f.is_file() and f.suffix in SUFFIXES)
            yield from found or [p]
        else:
            yield p


def read_documents(name: str, stdin: TextIO) -> tuple[list[Any], str | None]:
    import yaml

    if name != "-" and Path(name).is_dir():
        return [], f"no {', '.join(sorted(SUFFIXES))} files in this directory"
    try:
        text = stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        docs = list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        return [], f"cannot read: {e}".replace("\n", " ")
    return docs, None


def _objects(doc: Any) -> list[Any]:
    """A document's objects: itself, or the items of a v1 List."""
    if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"),
                                                                          list):
        return list(doc["items"])
    return [doc]


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None,
        stdin: TextIO | None = None) -> int:
    from nightshift.admission import operatorside

    out, err, stdin = out or sys.stdout, err or sys.stderr, stdin or sys.stdin
    loaded: list[tuple[str, int, dict[str, Any]]] = []
    results: list[Checked] = []
    for name in _expand(args.files):
        docs, problem = read_documents(name, stdin)
        if problem:
            results.append(Checked(name, 0, "", "", "", [Finding("parse", problem)]))
        for i, doc in enumerate(docs):
            for obj in _objects(doc):
                if obj is None:
                    continue
                if not isinstance(obj, dict):
                    results.append(Checked(name, i, "", "", "", [Finding(
                        "parse", f"not a Kubernetes object: a {type(obj).__name__}")]))
                    continue
                loaded.append((name, i, obj))
    old = _old_objects(args, stdin, results)
    try:
        facts = operatorside.facts_from_objects([o for _, _, o in loaded], _base_facts(args))
    except (OSError, ValueError, KeyError) as e:
        err.write(f"nightshift validate: --instance-catalog {args.instance_catalog}: {e}\n")
        return 1
    skipped = 0
    for name, i, obj in loaded:
        checked = check_object(name, i, obj, args.namespace, facts, old,
                               args.kubernetes_version)
        if checked is None:
            skipped += 1
        else:
            results.append(checked)
    return report(results, skipped, args.output, out, err)


def check_object(file: str, doc: int, obj: dict[str, Any], namespace: str,
                 facts: Any, old: dict[tuple[str, str, str], dict[str, Any]],
                 minor: int | None = None) -> Checked | None:
    """The findings for one object; None for kinds that are not Nightshift's."""
    from nightshift.admission import crds, operatorside
    from nightshift.admission.admit import admit
    from nightshift.admission.cel import NEWEST

    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    served = crds.kinds().get(kind)
    # One of our kinds under a group that is not ours but looks meant to be (or none) is
    # checked, and refused below as the API server would; another group's kind of the
    # same name (Tekton's PipelineRun, tekton.dev) is not ours, and is skipped.
    if api_version.split("/", maxsplit=1)[0] != GROUP and not (
            served and (not api_version or "nightshift" in api_version.lower())):
        return None
    checked = Checked(file, doc, kind, name, str(meta.get("namespace") or namespace))
    crd = crds.packaged().get((api_version, kind))
    if crd is None:
        hint = f"; use apiVersion {' or '.join(served)}" if served else ""
        checked.findings.append(Finding("admission", (
            f'no matches for kind "{kind}" in version "{api_version}"{hint}'
            if api_version else f"apiVersion is missing{hint}")))
        return checked
    obj = dict(obj)
    obj["metadata"] = {**meta, "namespace": checked.namespace} if crd.namespaced else meta
    previous = old.get((kind, checked.namespace, name))
    admission = admit(obj, crd, old=previous, minor=NEWEST if minor is None else minor)
    checked.findings += [Finding("admission", m) for m in admission.messages]
    if admission.ok:
        checked.findings += [Finding("operator", str(p))
                             for p in operatorside.operator_problems(admission.stored, facts)]
    return checked


def _old_objects(args: argparse.Namespace, stdin: TextIO, results: list[Checked]
                 ) -> dict[tuple[str, str, str], dict[str, Any]]:
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for name in _expand(args.old):
        docs, problem = read_documents(name, stdin)
        if problem:
            results.append(Checked(name, 0, "", "", "", [Finding("parse", problem)]))
        for doc in docs:
            for obj in _objects(doc):
                if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                    meta = obj["metadata"]
                    key = (str(obj.get("kind")), str(meta.get("namespace") or args.namespace),
                           str(meta.get("name")))
                    out[key] = obj
    return out


def _base_facts(args: argparse.Namespace) -> Any:
    from nightshift.admission.operatorside import Facts

    catalog = None
    if args.instance_catalog:
        from nightshift.virtualcluster.catalog import parse_kwok_catalog

        with open(args.instance_catalog, encoding="utf-8") as f:
            catalog = parse_kwok_catalog(json.load(f))
    classes = frozenset(args.storage_class) if args.storage_class is not None else None
    return Facts(provider=args.provider, catalog=catalog, storage_classes=classes,
                 default_storage_class=args.default_storage_class,
                 cluster_cidrs=tuple(args.cluster_cidr))


def report(results: list[Checked], skipped: int, output: str, out: TextIO,
           err: TextIO) -> int:
    problems = sum(len(r.findings) for r in results)
    if output == "json":
        doc = {"problems": problems, "skipped": skipped,
               "objects": [{**{k: v for k, v in asdict(r).items() if k != "findings"},
                            "ok": not r.findings,
                            "findings": [asdict(f) for f in r.findings]} for r in results]}
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        for r in results:
            for f in r.findings:
                out.write(f"{r.prefix}: {f.text}\n")
        checked = sum(1 for r in results if r.kind)
        err.write(f"{checked} Nightshift object{'s' if checked != 1 else ''} checked, "
                  f"{problems} problem{'s' if problems != 1 else ''}"
                  f"{f', {skipped} other objects skipped' if skipped else ''}\n")
    return 1 if problems else 0
