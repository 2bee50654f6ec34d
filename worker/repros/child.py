"""The repro child process: run repro scripts one after another, each with its own output file.

Run as ``python -m worker.repros.child --scripts DIR --events FILE``; ``worker.repros.verify`` starts it
under a time bound per repro (phase ``repro-<name>``). Each script runs as ``__main__`` in a fresh
namespace, so a repro behaves as it does when run on its own with ``python repro.py``; the imports of
torch and executorch are paid once for all of them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import runpy
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from worker.child.events import EventLog
from worker.lower.backends import all_backends


class _CurrentStderr:
    """A stream that writes to whatever ``sys.stderr`` is at the time: each repro's own output file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _import_backends() -> None:
    """Import torch, executorch and the backends' partitioners once, before the first repro (under the
    start phase's bound). XnnpackPartitioner's module calls ``logging.basicConfig`` at import (which
    VulkanPartitioner's imports pull in too): its handler would keep writing to the stderr of the repro
    that happened to import it first, so it is pointed at the current stderr instead, and every repro's
    output shows the log lines it shows when run on its own."""
    import executorch.exir  # noqa: F401
    import torch  # noqa: F401

    for module in dict.fromkeys(m for b in all_backends().values() for m in b.partitioner_modules):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stderr, sys.__stderr__):
            handler.setStream(_CurrentStderr())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.repros.child")
    parser.add_argument("--scripts", type=Path, required=True, help="a directory of <name>.py repros")
    parser.add_argument("--events", type=Path, required=True)
    args = parser.parse_args(argv)
    log = EventLog(args.events)
    _import_backends()
    root = logging.getLogger()
    for script in sorted(args.scripts.glob("*.py")):
        name = script.stem
        log.emit("phase", phase=f"repro-{name}")
        output = script.with_suffix(".out")
        start = time.monotonic()
        error = None
        handlers, level = list(root.handlers), root.level
        with output.open("w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except BaseException as raised:  # a repro that crashes is a finding, not the end of the run
                traceback.print_exc()
                error = f"{type(raised).__name__}: {raised}"
            finally:
                root.handlers[:] = handlers  # what one repro configures does not leak into the next
                root.setLevel(level)
        log.emit("repro", name=name, seconds=time.monotonic() - start, error=error)
    log.emit("phase", phase="done")
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
