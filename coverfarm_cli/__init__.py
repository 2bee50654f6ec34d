"""The ``coverfarm`` command: one sub-command module per job, registered here.

What it may import: every other package (``coverfarm``, ``farmrun``, ``worker``, ``gpu_runner``,
``orchestrator``, ``dashboard``); none imports it (tests/test_import_borders.py). ``python -m coverfarm_cli``
runs it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from coverfarm.errors import UserError, one_line
from coverfarm_cli import analyze, baseline, farm, results, runner, tokens
from coverfarm_cli.processes import die_with_parent

DESCRIPTION = (
    "How much of each LeRobot policy each ExecuTorch backend takes, and how it runs on devices: analyze one "
    "cell here, or run the farm (serve, worker, up, sweep), its device runners, baselines and results."
)
# Each module adds its sub-commands and sets ``func`` (returning the exit code) on their parsers.
COMMAND_MODULES = [analyze, baseline, farm, runner, tokens, results]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coverfarm", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except UserError as error:
        print(f"coverfarm: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
