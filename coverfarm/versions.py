"""Versions of everything that produced a result, recorded with it, and registered by a CPU worker (read
from the installed distributions' metadata: no torch import)."""

from __future__ import annotations

import platform
from functools import cache
from importlib import metadata

from coverfarm import backends

# Those every result depends on; a backend's own packages (coverfarm.backends) are added for its cells.
PACKAGES = ("coverfarm", "torch", "executorch", "lerobot", "transformers", "diffusers", "numpy")


@cache
def versions(*backend_names: str) -> dict[str, str]:
    """The versions of ``PACKAGES`` and of the packages that carry the named backends (a cell's own:
    the versions of a Vulkan cell do not change when another backend's package does)."""
    extra = [p for name in backend_names if (known := backends.info(name)) for p in known.packages]
    found = {"python": platform.python_version()}
    for package in dict.fromkeys([*PACKAGES, *extra]):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
