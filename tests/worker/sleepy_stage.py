"""A stand-in stage child for the time-bound tests: logs phases and measurements, then sleeps."""

from __future__ import annotations

import argparse
import time

from worker.child.events import EventLog

parser = argparse.ArgumentParser()
parser.add_argument("--partition-s", type=float, default=0.0)
parser.add_argument("--export-s", type=float, default=0.0)
parser.add_argument("--crash", action="store_true")
parser.add_argument("--events", required=True)
args = parser.parse_args()

from pathlib import Path  # noqa: E402

log = EventLog(Path(args.events))
log.emit("phase", phase="partition", program="forward")
log.emit("edge", program="forward", ops=10, macs=100)
time.sleep(args.partition_s)
if args.crash:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)
log.emit("phase", phase="export", program="forward")
time.sleep(args.export_s)
log.emit("done", failed=False)
