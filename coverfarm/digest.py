"""A bundle's address: the engine computes it when it writes a bundle, a device runner recomputes it to
verify what it fetched. sha256 over the sorted ``"<relative path>\\0<file sha256>\\n"`` lines of every
file under the bundle directory. No torch, so both sides can import it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_files(root: Path) -> list[str]:
    """The relative paths (posix) of the files the bundle's sha256 covers, in the digest's order (the
    paths' order, part by part)."""
    return [path.relative_to(root).as_posix() for path in sorted(p for p in root.rglob("*") if p.is_file())]


def bundle_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for name in bundle_files(root):
        digest.update(f"{name}\0{file_sha256(root / name)}\n".encode())
    return digest.hexdigest()
