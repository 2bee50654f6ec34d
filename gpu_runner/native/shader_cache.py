"""What the Vulkan driver's shader disk cache holds before a run's first load (NVIDIA's and Mesa's),
recorded with the load figures: it decides whether that first load is cold."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def shader_cache_state(environ: Mapping[str, str] | None = None, home: Path | None = None) -> str:
    """What the Vulkan driver's shader disk cache holds before a run's first load, which decides
    whether that load is cold: NVIDIA's GLCache (``__GL_SHADER_DISK_CACHE``, ``..._PATH``) and Mesa's
    cache (``MESA_SHADER_CACHE_DISABLE``, ``MESA_SHADER_CACHE_DIR``), under ``XDG_CACHE_HOME`` or
    ``~/.cache``."""
    env = os.environ if environ is None else environ
    cache_home = Path(env.get("XDG_CACHE_HOME") or (home or Path.home()) / ".cache")
    described = []
    for driver, off, path_var, default in (
        ("nvidia", "__GL_SHADER_DISK_CACHE", "__GL_SHADER_DISK_CACHE_PATH", cache_home / "nvidia/GLCache"),
        ("mesa", "MESA_SHADER_CACHE_DISABLE", "MESA_SHADER_CACHE_DIR", cache_home / "mesa_shader_cache"),
    ):
        disabled = env.get(off, "").strip().lower()
        if (driver == "nvidia" and disabled == "0") or (driver == "mesa" and disabled in ("1", "true")):
            described.append(f"{driver}: disabled ({off}={env[off]})")
            continue
        folder = Path(env[path_var]) if env.get(path_var) else default
        files = [f for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []
        if files:
            size = sum(f.stat().st_size for f in files)
            described.append(f"{driver}: {len(files)} files, {size / 1e6:.1f} MB in {folder}")
        elif folder.is_dir():
            described.append(f"{driver}: empty ({folder})")
    return "; ".join(described) or f"no shader disk cache found under {cache_home}"
