"""The content-addressed artifact store: a directory with one bundle directory per sha256.

``put`` verifies the content against its address before the bundle becomes visible (copied into a
staging directory, hashed, renamed into place), so whatever the store holds under a name hashed to that
name when it was stored; the runner verifies again after download (docs/design.md, "Security":
verified by hash on both ends). Putting a bundle that is already there is a no-op. No torch.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coverfarm.digest import bundle_digest

SHA256 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 16


class ArtifactError(Exception):
    """A bundle the store refuses (content that does not match its address) or cannot find."""


class NotStored(ArtifactError):
    """What was asked for is not in the store (a bundle, or a file of one)."""


@dataclass(frozen=True)
class Stored:
    sha256: str
    path: Path
    size_bytes: int
    files: int


def check_sha(sha256: str) -> str:
    # fullmatch: "$" would also match before a trailing newline.
    if not SHA256.fullmatch(sha256):
        raise ArtifactError(f"{sha256!r} is not a sha256 (64 lowercase hex digits)")
    return sha256


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / check_sha(sha256)

    def has(self, sha256: str) -> bool:
        return (self.path(sha256) / "manifest.json").is_file()

    def put(self, source: Path, sha256: str) -> Stored:
        """Store the bundle directory ``source`` under ``sha256`` after checking that it hashes to it."""
        final = self.path(sha256)
        if not final.is_dir():
            self.root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".put.", dir=self.root))
            try:
                shutil.copytree(source, staging, dirs_exist_ok=True)
                actual = bundle_digest(staging)
                if actual != sha256:
                    raise ArtifactError(f"bundle {source} hashes to {actual}, not {sha256}: not stored")
                try:
                    staging.rename(final)
                except OSError:
                    if not final.is_dir():  # not a concurrent put of the same bundle: a real failure
                        raise
            finally:
                if staging.exists():
                    shutil.rmtree(staging)
        return self.stat(sha256)

    def stat(self, sha256: str) -> Stored:
        folder = self.path(sha256)
        if not folder.is_dir():
            raise ArtifactError(f"bundle {sha256} is not in the store")
        files = [p for p in folder.rglob("*") if p.is_file()]
        return Stored(sha256, folder, sum(p.stat().st_size for p in files), len(files))

    def file(self, sha256: str, name: str) -> Path:
        """One file of a stored bundle by its path inside it (``programs/forward.pte``); a name that is
        not a plain relative path, or that leaves the bundle, is refused, and one that is not there too."""
        parts = name.split("/")
        if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ArtifactError(f"{name!r} is not a file's path inside a bundle")
        folder = self.path(sha256)
        if not folder.is_dir():
            raise NotStored(f"bundle {sha256} is not in the store")
        found = folder.joinpath(*parts)
        if found.is_symlink() or not found.is_file() or not found.resolve().is_relative_to(folder.resolve()):
            raise NotStored(f"bundle {sha256} has no file {name}")
        return found

    def tar_stream(self, sha256: str) -> Iterator[bytes]:
        """The bundle as an uncompressed tar (paths relative to the bundle), in chunks."""
        folder = self.path(sha256)
        if not folder.is_dir():
            raise ArtifactError(f"bundle {sha256} is not in the store")
        with tempfile.TemporaryFile() as spool:
            with tarfile.open(fileobj=spool, mode="w") as tar:
                for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                    tar.add(path, arcname=path.relative_to(folder).as_posix())
            spool.seek(0)
            while block := spool.read(CHUNK):
                yield block
