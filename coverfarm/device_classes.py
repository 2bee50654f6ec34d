"""Device class names (``cpu-x86_64-xnnpack``, ``mali-g610-vulkan``): their shape and their backend.

A class is a lowercase device slug followed by the backend whose bundles it runs; the probe derives them
(gpu_runner.probe.device_classes) and sweeps name them. No torch: every role imports this.
"""

from __future__ import annotations

import re

MAX_LENGTH = 48
_SHAPE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*-([a-z0-9]+)$")


def backend_of(device_class: str) -> str:
    """The backend a class runs (its last dash-separated word); ValueError when the name is malformed."""
    match = _SHAPE.match(device_class)
    if match is None or len(device_class) > MAX_LENGTH:
        raise ValueError(
            f"{device_class!r} is not a device class name: lowercase words joined by '-', ending in the "
            f"backend, at most {MAX_LENGTH} characters (e.g. cpu-x86_64-xnnpack, mali-g610-vulkan)"
        )
    return match.group(1)


def check(device_class: str, backends: list[str]) -> str:
    """``device_class`` when well formed and its backend is one of ``backends``; ValueError saying why not."""
    backend = backend_of(device_class)
    if backend not in backends:
        known = ", ".join(backends)
        raise ValueError(f"device class {device_class!r} runs backend {backend!r}, not one of {known}")
    return device_class
