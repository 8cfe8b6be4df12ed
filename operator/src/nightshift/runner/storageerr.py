"""What a storage's error says in a failed item's sample: the storage's own words and,
for the errors a user's setup causes, what to check. Pure."""

from __future__ import annotations

import errno
from collections.abc import Callable

from nightshift.api.names import MOUNT_STORAGE
from nightshift.aws.s3store import S3Store, denied, error_code, http_status, no_credentials
from nightshift.runner.store import DirStore

# What each use of a storage needs of the pod's S3 identity (named when it is refused).
OUTPUTS_NEED = ("the outputs need s3:ListBucket and s3:ListBucketMultipartUploads on the "
                "bucket, and s3:GetObject, s3:PutObject, s3:DeleteObject and "
                "s3:AbortMultipartUpload under their prefix")
INPUTS_NEED = ("the inputs need s3:ListBucket on the bucket and s3:GetObject under their "
               "prefix")
RECORDS_NEED = ("the task records need s3:GetObject and s3:PutObject under the archive's "
                "prefix (spec.archive.prefix)")
SAID_LIMIT = 300
# The keys themselves are not accepted: a wrong or stale Secret, not a missing permission.
BAD_KEYS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch"})
# Temporary credentials (IRSA, Pod Identity) the store no longer accepts.
BAD_TOKEN = frozenset({"ExpiredToken", "InvalidToken", "InvalidClientTokenId"})


def storage_error(e: BaseException, needs: str = OUTPUTS_NEED) -> str:
    """An error of a storage, as the run's failure sample shows it, with what to check
    for the three a user's setup causes: a pod with no S3 credentials (no
    credentialsSecret, and no IAM role for its service account), keys the store does not
    accept, and an identity the bucket refuses (`needs`: what this use needs)."""
    words = f"{type(e).__name__}: {' '.join(str(e).split())}"
    # AWS's AccessDenied repeats the key and the role's ARN: its words are cut, never the
    # fix after them (the run's failure sample keeps 700 characters of the line). The
    # fix is chosen on the whole words: a refused delete names its code after the key.
    said = words if len(words) <= SAID_LIMIT else words[:SAID_LIMIT - 1] + "…"
    code = error_code(e)
    if no_credentials(e):
        return (f"{said}; the pod has no S3 credentials: set the storage's credentialsSecret "
                "(spec.storage[].s3), or the stage's serviceAccountName with an IAM role")
    if code in BAD_KEYS:
        return (f"{said}; the store does not accept the pod's S3 keys: check "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the storage's "
                "credentialsSecret (spec.storage[].s3) and its endpoint and region")
    if code in BAD_TOKEN:
        return (f"{said}; the pod's temporary S3 credentials expired or are not valid: "
                "check the IAM role of the stage's serviceAccountName (IRSA or Pod "
                "Identity)")
    if http_status(e) == 403 or "AccessDenied" in words:
        return f"{said}; the pod's S3 identity is refused: {needs}"
    if isinstance(e, OSError) and denied(e) and str(e.filename or "").startswith(
            MOUNT_STORAGE + "/"):
        # A mounted storage's path (not the pod's own scratch or read-only root).
        if e.errno == errno.EROFS:
            return (f"{said}; a mounted storage is read-only here: mount its claim or "
                    "export read-write (the PersistentVolume's access mode, the NFS "
                    "export)")
        return (f"{said}; the file system refuses the pod's user (the stage's runAsUser "
                "and runAsGroup, 65532 by default): make the storage's directory "
                "writable by that group (an EFS access point's uid and gid, chown or "
                "chmod on the volume), or set spec.stages[].runAsUser and runAsGroup to "
                "its owner")
    return said


def url(store: S3Store | DirStore, full: str) -> str:
    """A key of a storage as a user finds it: an s3:// URL, or the path in the pod."""
    return (f"s3://{store.bucket}/{full}" if isinstance(store, S3Store)
            else f"{store.root}/{full}")


# What the pod's file system says of a key that can never be a file there: the same on
# every attempt, so not retried (ENOSPC, EIO and the like may be a moment's, or a node's).
UNSTAGEABLE = frozenset({errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR, errno.EEXIST})


class UnstageableKeyError(Exception):
    """An object's key cannot be a file under inputs/ (stage-in exits 1, not 75).
    `error` is the file system's refusal; `key` the object's."""

    def __init__(self, key: str, error: OSError) -> None:
        super().__init__(
            f"object {key!r} cannot be staged as a file: {error.strerror} ({error.filename}); "
            "a name over 255 bytes, or a key that is both a file and a folder's prefix (x "
            "and x/y), can never be one: rename or remove the object, or stage a prefix "
            "that holds no such key")
        self.key, self.error = key, error


def as_file(key: str, stage: Callable[[], object]) -> None:
    try:
        stage()
    except OSError as e:
        if e.errno not in UNSTAGEABLE:
            raise
        raise UnstageableKeyError(key, e) from e
