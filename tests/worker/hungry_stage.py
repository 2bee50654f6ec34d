"""A stand-in stage child for the memory tests: holds a given number of MB in each phase."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from worker.stages.events import EventLog

parser = argparse.ArgumentParser()
parser.add_argument("--partition-mb", type=int, default=0)
parser.add_argument("--export-mb", type=int, default=0)
parser.add_argument("--hold-s", type=float, default=0.0)
parser.add_argument("--events", required=True)
args = parser.parse_args()

log = EventLog(Path(args.events))
log.emit("phase", phase="partition")
held = bytearray(args.partition_mb * 2**20)  # zero-filled: every page is touched
time.sleep(args.hold_s)
del held
log.emit("phase", phase="export")
held = bytearray(args.export_mb * 2**20)
time.sleep(args.hold_s)
log.emit("done", failed=False)
