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


def bundle_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()
