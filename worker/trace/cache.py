"""The trace cache: a traced policy is reused while its policy, weights, code and versions are unchanged.

A trace is keyed by the sha256 of the policy name, seed, weights (real or fake), the checkpoint's file
contents, the versions of the packages that build and export it, and the source of the adapters and trace
stage (which decide the config, example inputs and programs). One directory per key; complete once
``trace.json`` exists.

One process builds a key at a time (``building``, an ``fcntl.flock`` on ``.<key>.lock`` beside it): a
policy's backends lowered at once (``coverfarm up`` runs several jobs) wait for its first trace and read
it, rather than each building the same one on the same CPUs. The lock dies with its process, and a wait
for it is bounded by the trace stage's own bounds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import worker.fake_programs
import worker.trace.fake_weights
import worker.trace.policies
import worker.trace.stage
from coverfarm.versions import versions
from farmrun.hostlock import open_lock_file, take_lock


def _digest_files(paths: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def code_digest() -> str:
    policies = Path(worker.trace.policies.__file__).parent
    files = [
        *policies.rglob("*.py"),
        Path(worker.trace.stage.__file__),
        Path(worker.trace.fake_weights.__file__),
        Path(worker.fake_programs.__file__),
    ]
    return _digest_files(files, policies.parent.parent)  # worker/: fake_programs.py is beside trace/


def checkpoint_digest(checkpoint: str | None) -> str | None:
    if checkpoint is None:
        return None
    root = Path(checkpoint)
    return _digest_files([p for p in root.rglob("*") if p.is_file()], root)


def trace_key(policy: str, seed: int, checkpoint: str | None, frames: int, weights: str = "real") -> str:
    fields = {
        "policy": policy,
        "weights": weights,
        "seed": seed,
        "frames": frames,
        "checkpoint": checkpoint_digest(checkpoint),
        "versions": {k: v for k, v in versions().items() if k != "coverfarm"},
        "code": code_digest(),
    }
    blob = json.dumps(fields, sort_keys=True).encode()
    return f"{policy}-{hashlib.sha256(blob).hexdigest()[:16]}"


def load_trace_manifest(trace_dir: Path) -> dict[str, Any] | None:
    path = trace_dir / "trace.json"
    if not path.exists():
        return None
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


@contextlib.contextmanager
def building(cache: Path, key: str, wait_s: float) -> Iterator[str]:
    """Hold ``key``'s build lock in ``cache`` while the block runs. Yields ``"free"`` (taken at once),
    ``"waited"`` (another process held it and let go: the trace may exist now, read it again) or
    ``"stuck"``: the holder kept it past ``wait_s``, longer than a trace's own bounds allow, and the
    block runs without the lock."""
    fd = open_lock_file(cache / f".{key}.lock")
    try:
        if take_lock(fd, fcntl.LOCK_EX, time.monotonic()):
            yield "free"
        else:
            yield "waited" if take_lock(fd, fcntl.LOCK_EX, time.monotonic() + wait_s) else "stuck"
    finally:
        os.close(fd)  # releases the lock
