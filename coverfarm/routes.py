"""Where a CPU lower job goes: one routing scheme, stack × memory class (no torch, no database).

A lower job's queue is a function of three facts the jobs table holds: the cell's stack, whether the job
is the longer re-run of a slow result, and the memory class its export needs (None for a job any worker
of its stack can hold)::

    lower[.long][.mem<GB>][@<stack>]

    lower, lower.long                         the default stack, any memory (the names before stacks)
    lower.mem64, lower.long.mem64             the default stack, a worker of at least 64 GB
    lower@et-1.4.1, lower.long@et-1.4.1       stack et-1.4.1, any memory
    lower.mem128@et-1.4.1                     stack et-1.4.1, a worker of at least 128 GB

Memory classes are a fixed ladder (``MEMORY_CLASSES_GB``): a job that needs N GB goes to the smallest
class of at least N, and a worker of M GB takes its stack's plain queues and every class of at most M.
So a worker never takes a job it cannot hold, at the price of a job needing 40 GB waiting for a 64 GB
worker while a 60 GB one idles. A need above the largest class has no queue (``NoMemoryClass``).

The default stack keeps the plain names so that a farm's queued messages, its workers' command lines
and its stored jobs read as before stacks existed; every other stack is spelled out in its queues.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection

from coverfarm.stacks import DEFAULT_STACK

LOWER = "lower"
LONG = ".long"
MEMORY_PREFIX = ".mem"
STACK_SEPARATOR = "@"
MEMORY_CLASSES_GB = (32, 64, 128, 256, 512)

# Lower case, digits and ``. + -``, starting with a letter or digit; 64 characters at most (the width
# of the stack columns). No ``@``, ``/`` or ``:``: a stack name is part of queue names, which the
# embedded broker also writes into file names.
STACK_NAME = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")
STACK_NAME_RULE = "lower-case letters, digits and . + -, starting with a letter or digit, at most 64"


class NoMemoryClass(ValueError):
    """A memory need above the largest memory class: no worker class holds it."""


def check_stack_name(name: str) -> str:
    """``name`` when it is a well-formed stack name; ValueError saying the rule otherwise."""
    if not isinstance(name, str) or STACK_NAME.fullmatch(name) is None:
        raise ValueError(f"stack name {name!r} is not well formed: {STACK_NAME_RULE}")
    return name


def memory_class(need_gb: float | None) -> int | None:
    """The memory class (GB) of a job that needs ``need_gb``: the smallest class that holds it; None for
    a job with no particular need. NoMemoryClass past the largest class."""
    if need_gb is None:
        return None
    for size in MEMORY_CLASSES_GB:
        if need_gb <= size:
            return size
    raise NoMemoryClass(f"{need_gb:g} GB is more than the largest memory class ({MEMORY_CLASSES_GB[-1]} GB)")


def classes_held(memory_gb: float | None) -> list[int]:
    """The memory classes a worker with ``memory_gb`` takes (every class of at most that much)."""
    if memory_gb is None or not math.isfinite(memory_gb):
        return []
    return [size for size in MEMORY_CLASSES_GB if size <= memory_gb]


def lower_queue(stack: str = DEFAULT_STACK, *, long: bool = False, memory_gb: int | None = None) -> str:
    """The queue of a lower job of ``stack``: the longer re-run's when ``long``, memory class
    ``memory_gb`` (one of ``MEMORY_CLASSES_GB``) when given."""
    check_stack_name(stack)
    if memory_gb is not None and memory_gb not in MEMORY_CLASSES_GB:
        raise ValueError(f"{memory_gb} GB is not a memory class ({', '.join(map(str, MEMORY_CLASSES_GB))})")
    name = LOWER + (LONG if long else "") + (f"{MEMORY_PREFIX}{memory_gb}" if memory_gb is not None else "")
    return name if stack == DEFAULT_STACK else f"{name}{STACK_SEPARATOR}{stack}"


def worker_queues(stack: str, memory_gb: float | None) -> list[str]:
    """Every queue a worker of ``stack`` with ``memory_gb`` per job takes, plain ones first."""
    queues = [lower_queue(stack), lower_queue(stack, long=True)]
    for size in classes_held(memory_gb):
        queues += [lower_queue(stack, memory_gb=size), lower_queue(stack, long=True, memory_gb=size)]
    return queues


def waiting_reason(stack: str, memory_gb: float | None, live_stacks: Collection[str]) -> str:
    """Why a queued lower job that no live worker takes waits: no worker of its stack is live at all,
    or none of its memory class (``memory_gb`` is the job's need)."""
    if stack not in live_stacks:
        return f"waiting for a worker of stack {stack}"
    size = memory_class(memory_gb)
    if size is None:
        return f"waiting for a worker of stack {stack} that takes this queue"
    return f"waiting for a ≥ {size} GB worker of stack {stack}"
