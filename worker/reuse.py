"""Result reuse: the key of a lower result, and the stored result a cell with that key takes.

A cell's lower result depends on the cell (policy, backend, options), the trace it lowers (its trace key),
how ``weights: auto`` resolves on this worker, the stack's versions and the engine's own code. The
worker hashes all of it into the reuse key when it takes a lower job; a stored result with the same key
(ok, or slow and failed too when the sweep asks: ``orchestrator.jobs.service.reusable``) is copied into
the job at once, marked ``reused_from``, with the same bundle, instead of lowering again.

What an engine contributes to the key is its module's ``reuse_fields(policy, options)`` (the real
engine's is ``stack_fields``); an engine without one is never reused. Device runs are never reused: a
device's number belongs to its run, so a reused ok result with a bundle gets device jobs of its own.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from coverfarm.result import Options

WORKER = Path(__file__).resolve().parent
# The engine's code that lowers and counts: a change to any of it may change a result.
ENGINE_SOURCES = ("lowering", "stages", "metrics", "backends.py", "assemble.py", "bundle.py", "engine.py")

ReuseFields = Callable[[str, Options], dict[str, Any]]


@cache
def engine_code_digest() -> str:
    """sha256 over the engine's source files (ENGINE_SOURCES), computed once per process."""
    digest = hashlib.sha256()
    for name in ENGINE_SOURCES:
        path = WORKER / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(WORKER)).encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def stack_fields(policy: str, options: Options) -> dict[str, Any]:
    """The real engine's part of the key: trace key, weights resolution, versions and code digest.

    ``weights: auto`` resolves from the policy's size (fixed by the trace's inputs) against this
    worker's memory, so for auto the worker's memory is part of the key.
    """
    from worker.memory import worker_memory_gb
    from worker.trace_cache import trace_key
    from worker.versions import versions

    weights: dict[str, Any] = {"requested": options.weights}
    if options.weights == "auto":
        weights["worker_memory_gb"] = round(worker_memory_gb(), 3)
    return {
        "trace": trace_key(policy, options.seed, options.checkpoint, options.frames, options.weights),
        "weights": weights,
        "versions": versions(),
        "engine": engine_code_digest(),
    }


def engine_fields(spec: str) -> ReuseFields | None:
    """The ``reuse_fields`` of engine ``module:function``'s module; None when it has none."""
    module = importlib.import_module(spec.partition(":")[0])
    fields: ReuseFields | None = getattr(module, "reuse_fields", None)
    return fields


def reuse_key(fields: ReuseFields, policy: str, backend: str, options: Options) -> str:
    blob = {"policy": policy, "backend": backend, "options": options.model_dump(mode="json")}
    blob |= fields(policy, options)
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()
