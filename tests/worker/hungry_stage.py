"""A stand-in stage child for the memory tests: holds a given number of MB in each phase.

``--late-s S`` writes the export phase event (with the time of the phase boundary) only S seconds after
the export buffer is allocated: the window in which the parent's samples hold the next phase's memory
before it reads the event that starts that phase, stretched so that samples certainly fall in it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from worker.child.events import EventLog

parser = argparse.ArgumentParser()
parser.add_argument("--partition-mb", type=int, default=0)
parser.add_argument("--export-mb", type=int, default=0)
parser.add_argument("--hold-s", type=float, default=0.0)
parser.add_argument("--late-s", type=float, default=0.0)
parser.add_argument("--events", required=True)
args = parser.parse_args()

log = EventLog(Path(args.events))
log.emit("phase", phase="partition")
held = bytearray(args.partition_mb * 2**20)  # zero-filled: every page is touched
time.sleep(args.hold_s)
del held
if args.late_s:
    boundary = json.dumps({"event": "phase", "t": time.time(), "phase": "export"})
    held = bytearray(args.export_mb * 2**20)
    time.sleep(args.late_s)
    with Path(args.events).open("a", encoding="utf-8") as late:
        late.write(boundary + "\n")
else:
    log.emit("phase", phase="export")
    held = bytearray(args.export_mb * 2**20)
time.sleep(args.hold_s)
log.emit("done", failed=False)
