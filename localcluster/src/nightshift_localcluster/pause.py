"""The real node's pause (sandbox) image, built here: a static C program in a one-layer
image, packed as a `docker save`-style archive for `ctr images import`.

No registry is needed: the archive is cached under $NIGHTSHIFT_CACHE/images, keyed by
the program's source, and imported into the node's containerd at every `up`.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from nightshift_localcluster.paths import LocalClusterError

# Holds the sandbox's namespaces; exits on SIGINT/SIGTERM; reaps orphans (it is PID 1
# when the pod shares its process namespace).
PAUSE_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, quit);
  signal(SIGTERM, quit);
  signal(SIGCHLD, reap);
  for (;;) pause();
  return 1;
}
"""


def docker_archive(out: Path, tag: str, files: dict[str, tuple[bytes, int]],
                   config: dict[str, object]) -> None:
    """Write a one-layer `docker save` archive: files maps path -> (bytes, mode)."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.USTAR_FORMAT) as lt:
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            lt.addfile(info, io.BytesIO(data))
    layer = layer_buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    image_config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "nightshift-localcluster"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(image_config).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag],
                            "Layers": [layer_name]}]).encode()
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in ((config_name, image_config), (layer_name, layer),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            t.addfile(info, io.BytesIO(data))
    tmp.rename(out)


def build(cache: Path, tag: str) -> Path:
    """The pause image archive, built once per source version."""
    key = hashlib.sha256((PAUSE_C + tag).encode()).hexdigest()[:12]
    out = cache / "images" / f"pause-{key}.tar"
    if out.exists():
        return out
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise LocalClusterError("gcc is needed to build the real node's pause image: "
                                "apt-get install -y gcc libc6-dev (hack/realnode-deps.sh)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "pause.c", Path(tmp) / "pause"
        src.write_text(PAUSE_C)
        r = subprocess.run([cc, "-static", "-Os", "-s", "-o", str(exe), str(src)],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise LocalClusterError(
                f"compiling the pause program failed (static libc missing? apt-get install "
                f"-y libc6-dev): {r.stderr.strip()}")
        docker_archive(out, tag, {"pause": (exe.read_bytes(), 0o755)},
                       {"Entrypoint": ["/pause"], "User": "65535:65535"})
    return out
