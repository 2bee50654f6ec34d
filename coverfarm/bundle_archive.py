"""A bundle on the wire: the uncompressed tar the orchestrator's store serves (``ArtifactStore.tar_stream``)
and a device runner, or ``coverfarm sweep bundles``, unpacks. The receiver verifies its sha256 after
unpacking (``coverfarm.digest``). No torch.
"""

from __future__ import annotations

import tarfile
from pathlib import Path


def unpack(archive: Path, into: Path) -> None:
    """Extract a bundle tar fetched from the store (tarfile's "data" filter refuses links and escapes)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:") as tar:
        tar.extractall(into, filter="data")
