"""Paths and keys built from items stay under their root (issue 14: path escape).

Items come from ConfigMaps and S3 listings a tenant (or someone writing to the tenant's
bucket) controls. Each test checks what actually happens on disk or what is sent to S3,
not what the containment helper says, so a wrong helper cannot pass them.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import Item, Paths, RunnerConfig, StorageConfig
from nightshift.runner.download import relative_dest
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore

# Segments that matter for escapes, mixed with arbitrary text.
SEGMENTS = st.sampled_from(["..", ".", "", "pvc", "pvc2", "proj", "other", "link", "x",
                            "..\\..", "a\\b", "\\", "a\0b", "~", "%2e%2e", "...", "/"])
ITEMS = st.one_of(
    st.lists(SEGMENTS, max_size=7).map("/".join),
    st.lists(SEGMENTS, min_size=1, max_size=7).map(lambda s: "/" + "/".join(s)),
    st.text(max_size=24),
    st.lists(st.one_of(SEGMENTS, st.text(max_size=6)), max_size=5).map("/".join),
    # Climbs: n levels up, then somewhere (a sibling volume, another project, a link).
    st.tuples(st.integers(0, 4), st.sampled_from(["pvc2", "pvc2/raw", "other", "link",
                                                  "outside", "x", ""])).map(
        lambda t: "../" * t[0] + t[1]),
)
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def files_under(root: Path) -> set[Path]:
    return {Path(d) / f for d, _, fs in os.walk(root) for f in fs}


def make_world(tmp_path: Path) -> Path:
    """A PVC root with a sibling whose name starts with the root's, and a symlink out."""
    (tmp_path / "pvc" / "proj" / "raw" / "a").mkdir(parents=True)
    (tmp_path / "pvc" / "proj" / "raw" / "a" / "f.txt").write_text("mine")
    (tmp_path / "pvc" / "other" / "raw").mkdir(parents=True)
    (tmp_path / "pvc" / "other" / "raw" / "secret.txt").write_text("another project")
    (tmp_path / "pvc2" / "raw").mkdir(parents=True)
    (tmp_path / "pvc2" / "raw" / "secret.txt").write_text("another volume")
    (tmp_path / "outside").mkdir()
    (tmp_path / "pvc" / "proj" / "link").symlink_to(tmp_path / "outside")
    return tmp_path


@pytest.fixture
def world(tmp_path: Path) -> Path:
    return make_world(tmp_path)


def runner_cfg(world: Path, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
               kind: str = "dir") -> RunnerConfig:
    storage: dict[str, Any] = ({"kind": "dir", "path": str(world / "pvc"), "prefix": "proj/"}
                               if kind == "dir" else
                               {"kind": "s3", "bucket": "b", "prefix": "proj/"})
    return RunnerConfig.loads(json.dumps({"version": 1, "run": "r", "namespace": "ns", "stage": "s",
                             "storages": {"data": storage}, "inputs": inputs,
                             "outputs": outputs}))


# --- DirStore: the store itself refuses keys that leave the volume -------------------------

@pytest.mark.parametrize("key", ["..", "../pvc2/x", "../pvc2/raw/secret.txt", "/etc/passwd",
                                 "proj/link/x", "proj/a/../../../pvc2/x", "a\0b",
                                 "proj/../../pvc2/raw/secret.txt"])
def test_dirstore_refuses_keys_outside_the_volume(world: Path, key: str) -> None:
    store = DirStore("data", world / "pvc")
    before = files_under(world)
    with pytest.raises(ValueError, match="storage 'data'"):
        store.put_bytes(key, b"planted")
    with pytest.raises(ValueError, match="storage 'data'"):
        store.get_bytes(key)
    assert files_under(world) == before


def test_dirstore_keeps_backslashes_literal(world: Path) -> None:
    # On Linux a backslash is a file-name character, not a separator: contained.
    store = DirStore("data", world / "pvc")
    store.put_bytes("proj/..\\..\\x", b"ok")
    assert (world / "pvc" / "proj" / "..\\..\\x").read_bytes() == b"ok"


@PROPERTY
@given(item=ITEMS)
def test_dirstore_writes_nothing_outside_its_root(item: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        world = make_world(Path(d))
        store = DirStore("data", world / "pvc")
        before = files_under(world)
        try:
            store.put_bytes(f"proj/out/{item}/_SUCCESS", b"{}")
        except ValueError:
            assert files_under(world) == before
            return
        except (IsADirectoryError, NotADirectoryError, FileExistsError):
            return  # the item names an existing file as a directory: nothing written
        [new] = files_under(world) - before
        assert Path(os.path.realpath(new)).is_relative_to(os.path.realpath(world / "pvc"))


# --- Stage-in: the item is refused before anything is staged or linked ---------------------

@pytest.mark.parametrize("item", ["../../../pvc2/raw", "../../other/raw", "../../../outside",
                                  "../link", "a/../../../../pvc2/raw"])
def test_stage_in_refuses_an_input_item_that_escapes(world: Path, item: str) -> None:
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/{item}/"}], [])
    paths = Paths(world / "pod")
    stores: dict[str, Any] = {"data": DirStore("data", world / "pvc")}
    with pytest.raises(ValueError) as err:
        stage_in(cfg, paths, Item(item, 0, 0), stores)
    assert repr(item) in str(err.value) and "inputs[0]" in str(err.value)
    assert not any(p.name == "secret.txt" for p in files_under(world / "pod"))


def test_stage_in_refuses_a_stream_link_that_escapes(world: Path) -> None:
    cfg = runner_cfg(world, [{"storage": "data", "path": "{item}", "mode": "stream"}], [])
    paths = Paths(world / "pod")
    with pytest.raises(ValueError, match="inputs\\[0\\]"):
        stage_in(cfg, paths, Item("../pvc2/raw", 0, 0), {})
    links = [p for p in (world / "pod").rglob("*") if p.is_symlink()]
    assert links == []


@pytest.mark.parametrize("kind", ["dir", "s3"])
@pytest.mark.parametrize("item", ["../../x", "../../../pvc2", "../../other/out/y"])
def test_stage_in_refuses_an_output_item_that_escapes(world: Path, kind: str, item: str) -> None:
    # Checked in the init container: the pod fails before any step runs or commits.
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/"}], kind=kind)
    with pytest.raises(ValueError) as err:
        stage_in(cfg, Paths(world / "pod"), Item(item, 0, 0), {})
    assert repr(item) in str(err.value) and "outputs[0]" in str(err.value)


@pytest.mark.parametrize("kind", ["dir", "s3"])
def test_stage_in_accepts_ordinary_items(world: Path, kind: str) -> None:
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/"}], kind=kind)
    for item in ["night-0001", "a/b", "x..y", "..hidden", "a\\b", "sp ace", "ümlaut"]:
        stage_in(cfg, Paths(world / "pod"), Item(item, 0, 0), {})


def test_stage_in_of_a_contained_item_still_works(world: Path) -> None:
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/{item}/"}], [])
    paths = Paths(world / "pod")
    stage_in(cfg, paths, Item("a", 0, 0), {"data": DirStore("data", world / "pvc")})
    assert (paths.inputs / "f.txt").read_text() == "mine"


# --- Stage-in destinations from listed keys -----------------------------------------------

def test_relative_dest_refuses_a_sibling_with_the_same_name_prefix(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in2").mkdir()
    with pytest.raises(ValueError, match="outside"):
        relative_dest(tmp_path / "in", "p/", "p/../in2/x", single=False)


@pytest.fixture(scope="module")
def dest_world() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for sub in ("in", "in2", "outside"):
            (root / sub).mkdir()
        (root / "in" / "link").symlink_to(root / "outside")
        yield root


@PROPERTY
@given(item=ITEMS, single=st.booleans())
def test_relative_dest_stays_under_base(dest_world: Path, item: str, single: bool) -> None:
    base = dest_world / "in"
    key = f"p/{item}"
    try:
        dest = relative_dest(base, key if single else "p/", key, single)
    except ValueError:
        return
    real = Path(os.path.realpath(dest))
    assert real.is_relative_to(os.path.realpath(base)) and real != Path(os.path.realpath(base))


# --- S3: keys built from items never leave the storage's prefix ---------------------------

class RecordingS3:
    """Stands in for the boto3 client: records what would be sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def put_object(self, **kw: Any) -> dict[str, Any]:
        self.sent.append(("put", kw["Key"]))
        return {"ETag": '"e"'}

    def get_object(self, **kw: Any) -> dict[str, Any]:
        self.sent.append(("get", kw["Key"]))
        raise AssertionError("not reached in these tests")

    def delete_objects(self, **kw: Any) -> dict[str, Any]:
        self.sent.extend(("delete", o["Key"]) for o in kw["Delete"]["Objects"])
        return {}


def s3store(prefix: str = "proj/") -> tuple[S3Store, RecordingS3]:
    fake = RecordingS3()
    return S3Store(StorageConfig("data", "s3", bucket="b", prefix=prefix), fake), fake  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["proj/out/../../etc/x", "proj/../other/x", "../x", "/etc/x",
                                 "proj/a/../../b", "proj/out/a\0b", "other/x", "..",
                                 "proj/out/../../../x"])
def test_s3store_refuses_keys_outside_its_prefix(key: str) -> None:
    store, fake = s3store()
    with pytest.raises(ValueError, match="prefix"):
        store.put_bytes(key, b"{}")
    with pytest.raises(ValueError, match="prefix"):
        store.delete([key])
    assert fake.sent == []


@pytest.mark.parametrize("key", ["proj/out/x", "proj/out/../x", "proj/a\\..\\..\\b",
                                 "proj/out/x..y/_SUCCESS"])
def test_s3store_sends_keys_inside_its_prefix_unchanged(key: str) -> None:
    store, fake = s3store()
    store.put_bytes(key, b"{}")
    assert fake.sent == [("put", key)]


@pytest.fixture(scope="module")
def bucket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "b" / "proj").mkdir(parents=True)
        yield Path(d) / "b"


@PROPERTY
@given(item=ITEMS, prefix=st.sampled_from(["proj/", "proj/sub/", ""]))
def test_s3_keys_from_items_stay_under_the_prefix(bucket_dir: Path, item: str,
                                                  prefix: str) -> None:
    # The oracle: where a gateway that maps keys to files (versitygw's posix backend,
    # a sync to disk) would put the object.
    store, fake = s3store(prefix)
    try:
        store.put_bytes(f"{prefix}out/{item}/_SUCCESS", b"{}")
    except ValueError:
        assert fake.sent == []
        return
    [(_, key)] = fake.sent
    assert "\0" not in key
    landed = Path(os.path.realpath(os.path.join(bucket_dir, key)))
    assert landed.is_relative_to(os.path.realpath(bucket_dir / prefix))


# --- Matrix fields and gathered items go through the same checks ---------------------------

@pytest.mark.parametrize(("site", "source"), [("..", ".."), ("..", "x"), ("a\0b", "x")])
def test_stage_in_refuses_matrix_fields_that_escape(world: Path, site: str, source: str) -> None:
    cfg = runner_cfg(world, [{"storage": "data", "path": "{site}/{source}/raw/"}], [])
    item = Item(f"{site}/{source}", 0, 0, (("site", site), ("source", source)))
    with pytest.raises(ValueError) as err:
        stage_in(cfg, Paths(world / "pod"), item, {"data": DirStore("data", world / "pvc")})
    assert "inputs[0]" in str(err.value)
    assert not any(p.name == "secret.txt" for p in files_under(world / "pod"))


def test_matrix_fields_fill_paths(world: Path) -> None:
    cfg = runner_cfg(world, [{"storage": "data", "path": "{site}/{src}/"}],
                     [{"storage": "data", "path": "out/{src}-{site}/"}])
    item = Item("raw/a", 3, 0, (("site", "raw"), ("src", "a")))
    paths = Paths(world / "pod")
    stage_in(cfg, paths, item, {"data": DirStore("data", world / "pvc")})
    assert (paths.inputs / "f.txt").read_text() == "mine"


def gather_cfg(world: Path, local_path: str = "bands") -> RunnerConfig:
    return runner_cfg(world, [{"storage": "data", "path": "raw/{gather}/", "gather": "split",
                               "localPath": local_path}], [])


def write_gathered(paths: Paths, items: list[str]) -> None:
    folder = paths.gather("split")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "items").write_text("".join(f"{x}\n" for x in items))


def test_gather_stages_one_copy_per_gathered_item(world: Path) -> None:
    (world / "pvc" / "proj" / "raw" / "b").mkdir()
    (world / "pvc" / "proj" / "raw" / "b" / "g.txt").write_text("band b")
    paths = Paths(world / "pod")
    write_gathered(paths, ["a", "b"])
    stats = stage_in(gather_cfg(world), paths, Item("x", 0, 0),
                     {"data": DirStore("data", world / "pvc")})
    assert (paths.inputs / "bands" / "a" / "f.txt").read_text() == "mine"
    assert (paths.inputs / "bands" / "b" / "g.txt").read_text() == "band b"
    assert stats.files == 2


@pytest.mark.parametrize("gathered", ["../../../pvc2/raw", "../../other/raw", "../link", ".."])
def test_gather_refuses_a_gathered_item_that_escapes(world: Path, gathered: str) -> None:
    paths = Paths(world / "pod")
    write_gathered(paths, ["a", gathered])
    with pytest.raises(ValueError) as err:
        stage_in(gather_cfg(world, ""), paths, Item("x", 0, 0),
                 {"data": DirStore("data", world / "pvc")})
    assert "inputs[0]" in str(err.value)
    assert not any(p.name == "secret.txt" for p in files_under(world / "pod"))


def test_gather_without_its_items_volume_is_a_config_error(world: Path) -> None:
    with pytest.raises(ValueError, match="gather 'split': no items"):
        stage_in(gather_cfg(world), Paths(world / "pod"), Item("x", 0, 0), {})


@PROPERTY
@given(gathered=st.lists(ITEMS.filter(lambda s: s and "\n" not in s and "\r" not in s),
                         min_size=1, max_size=4))
def test_gathered_items_never_read_or_land_outside(gathered: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        world = make_world(Path(d))
        paths = Paths(world / "pod")
        write_gathered(paths, gathered)
        with contextlib.suppress(ValueError, OSError):  # refused: checked below either way
            stage_in(gather_cfg(world, ""), paths, Item("x", 0, 0),
                     {"data": DirStore("data", world / "pvc")})
        staged = files_under(paths.inputs) if paths.inputs.exists() else set()
        assert not any(p.name == "secret.txt" for p in staged)
        for p in staged:
            assert Path(os.path.realpath(p)).is_relative_to(os.path.realpath(paths.inputs))
