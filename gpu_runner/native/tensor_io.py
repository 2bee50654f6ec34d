"""A native run's tensors as files: each input as the raw little-endian bytes ``--inputs`` reads, each
``X-<i>.bin`` output read back as the manifest's dtype and shape, checked against the manifest both
ways; and the folder a live server's files go to (``/dev/shm`` or ``COVERFARM_NATIVE_IO_DIR``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from coverfarm.bundle_manifest import TensorSpec
from gpu_runner.runtime import RuntimeFailure


def encode(array: np.ndarray, spec: TensorSpec) -> bytes:
    """``array`` as the raw little-endian bytes ``--inputs`` reads, after checking it against the manifest."""
    if list(array.shape) != spec.shape or str(array.dtype) != spec.dtype:
        raise RuntimeFailure(
            f"input {spec.name} is {array.dtype}{list(array.shape)}, "
            f"the manifest says {spec.dtype}{spec.shape}"
        )
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def decode(path: Path, spec: TensorSpec) -> np.ndarray:
    """An ``X-<i>.bin`` output file as the manifest's dtype and shape."""
    dtype = np.dtype(spec.dtype).newbyteorder("<")
    expected = int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize
    try:
        data = path.read_bytes()
    except OSError:
        raise RuntimeFailure(f"executor_runner wrote no {path.name} for output {spec.name}") from None
    if len(data) != expected:
        raise RuntimeFailure(
            f"output {spec.name} ({path.name}) has {len(data)} bytes, "
            f"{spec.dtype}{spec.shape} needs {expected}"
        )
    return np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(spec.shape)


SHARED_MEMORY = Path("/dev/shm")
IO_DIR_ENV_VAR = "COVERFARM_NATIVE_IO_DIR"


def memory_folder() -> str | None:
    """Where a live server's ``.bin`` inputs and outputs go: ``COVERFARM_NATIVE_IO_DIR`` where set, else
    ``/dev/shm`` (memory, so that a call's hand-over is copies, not disk writes) where it is a writable
    folder, else the default temp folder."""
    if chosen := os.environ.get(IO_DIR_ENV_VAR):
        return chosen
    return str(SHARED_MEMORY) if SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK) else None
