"""Helpers shared by the runner's tests (a uniquely named module: each test folder has a conftest)."""

from __future__ import annotations

import shutil
from pathlib import Path

from coverfarm.digest import bundle_digest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def rehomed(bundle: Path, where: Path) -> Path:
    """``bundle`` after an edit, moved to the directory its new content hashes to (a well-formed bundle)."""
    final = where / bundle_digest(bundle)
    shutil.move(bundle, final)
    return final
