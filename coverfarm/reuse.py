"""Result reuse: the key of a lower result, from the cell and what its engine says the result depends on
(no torch).

A cell's lower result depends on the cell (policy, backend, options) and on what the engine names: for
the real engine the trace it lowers (its trace key), how ``weights: auto`` resolves on this worker, the
stack's versions and the engine's own code (``worker.engine.stack_fields``). The CPU worker's task
(``orchestrator.jobs.tasks``) hashes all of it into the reuse key when it takes a lower job; a stored
result with the same key (ok, or slow and failed too when the sweep asks:
``orchestrator.jobs.service.reusable``) is copied into the job at once, marked ``reused_from``, with the
same bundle, instead of lowering again.

What an engine contributes to the key is its module's ``reuse_fields(policy, options)``, found beside the
engine's function when the engine is loaded by its configured name (``settings.engine``, a plugin, not an
import); an engine without one is never reused. Device runs are never reused: a device's number belongs
to its run, so a reused ok result with a bundle gets device jobs of its own.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from typing import Any

from coverfarm.result import Options

ReuseFields = Callable[[str, Options], dict[str, Any]]


def engine_fields(spec: str) -> ReuseFields | None:
    """The ``reuse_fields`` of engine ``module:function``'s module; None when it has none."""
    module = importlib.import_module(spec.partition(":")[0])
    fields: ReuseFields | None = getattr(module, "reuse_fields", None)
    return fields


# Options added after results were stored, each false or empty at its default.
LATER_OPTIONS = ("etrecord", "workarounds")


def reuse_key(fields: ReuseFields, policy: str, backend: str, options: Options) -> str:
    # An option added later is left out at its default, so the keys of results stored before it stand.
    later = {name for name in LATER_OPTIONS if not getattr(options, name)}
    blob = {"policy": policy, "backend": backend, "options": options.model_dump(mode="json", exclude=later)}
    blob |= fields(policy, options)
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()
