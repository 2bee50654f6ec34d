"""Versions of everything that produced a result, recorded with it, and registered by a CPU worker (read
from the installed distributions' metadata: no torch import)."""

from __future__ import annotations

import platform
from functools import cache
from importlib import metadata

PACKAGES = ("coverfarm", "torch", "executorch", "lerobot", "transformers", "diffusers", "numpy")


@cache
def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
