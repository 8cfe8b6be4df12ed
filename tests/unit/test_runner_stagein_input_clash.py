"""Two inputs whose files clash under inputs/ (one places a file where the other needs a
folder, or a folder where it needs a file): stage-in fails for good (exit 1) naming
both inputs and their localPaths, where it used to blame the second input's object
("rename or remove the object") for a name only the inputs' places made clash. A clash
within one input's own keys still names the object.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.runner_s3 import BUCKET, bucket, config
from tests.unit.test_runner_stagein_local_errors import stage_in


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def ref(path: str, local: str) -> dict[str, Any]:
    return {"storage": "data", "path": path, "localPath": local, "cache": False}


@pytest.mark.parametrize(("first", "second", "objects", "refusal"), [
    # inputs[0] puts the file cal; inputs[1] needs cal/ as its folder (mkdir: EEXIST).
    (ref("raw/{item}/", ""), ref("flat/{item}/", "cal"),
     ["proj/raw/n1/cal", "proj/flat/n1/f.fits"], "File exists"),
    # ... or needs cal/sub/ (mkdir of a path under a file: ENOTDIR).
    (ref("raw/{item}/", ""), ref("flat/{item}/", "cal/sub"),
     ["proj/raw/n1/cal", "proj/flat/n1/f.fits"], "Not a directory"),
    # inputs[0] puts files in the folder cal/; inputs[1] needs cal as a file (EISDIR).
    (ref("raw/{item}/", ""), ref("bias/{item}/cal", ""),
     ["proj/raw/n1/cal/flat.fits", "proj/bias/n1/cal"], "Is a directory"),
], ids=["file-then-folder", "file-then-subfolder", "folder-then-file"])
def test_two_inputs_whose_names_clash_are_named_not_the_object(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        first: dict[str, Any], second: dict[str, Any], objects: list[str],
        refusal: str) -> None:
    for k in objects:
        s3.put_object(Bucket=BUCKET, Key=k, Body=b"x")
    rc, said = stage_in(tmp_path, config([first, second], []), caplog)
    assert rc == 1, said
    assert said.startswith(f"stage-in failed (exit 1): inputs[1] (data: s3://{BUCKET}/"
                           f"proj/{second['path'].replace('{item}', 'n1')}): object "
                           f"'{objects[1]}' cannot be staged at "), said
    assert f"inputs[0] already placed {tmp_path}/pod/" in said, said
    assert f"/inputs/cal there ({refusal})" in said, said
    assert (f"(inputs[0].localPath '{first['localPath']}', inputs[1].localPath "
            f"'{second['localPath']}') and their names clash: give each input its own "
            "localPath") in said, said
    assert "rename or remove the object" not in said, said


def test_a_clash_within_one_inputs_keys_still_names_the_object(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Both inputs stage into inputs/ itself, but their names do not meet: the clash
    is inputs[1]'s own (cal and cal/x in its storage), and the fix is the object's."""
    for k in ("proj/raw/n1/a.fits", "proj/flat/n1/cal", "proj/flat/n1/cal/x"):
        s3.put_object(Bucket=BUCKET, Key=k, Body=b"x")
    rc, said = stage_in(tmp_path, config([ref("raw/{item}/", ""), ref("flat/{item}/", "")],
                                         []), caplog)
    assert rc == 1, said
    assert said.startswith(f"stage-in failed (exit 1): inputs[1] (data: s3://{BUCKET}/"
                           "proj/flat/n1/): object 'proj/flat/n1/cal"), said
    assert said.endswith("rename or remove the object, or stage a prefix that holds no "
                         "such key"), said
