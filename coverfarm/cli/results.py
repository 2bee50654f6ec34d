"""``coverfarm results import FILE``: store a signed offline device result (admin)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coverfarm.cli.farm import DEFAULT_URL, _request, _token
from coverfarm.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    results = sub.add_parser("results", help="device results made offline").add_subparsers(
        dest="results_command", required=True, metavar="RESULTS_COMMAND"
    )
    load = results.add_parser(
        "import", help="verify a signed `runner run-bundle` result and store it as its cells' device result"
    )
    load.add_argument("file", type=Path, metavar="FILE", help="the result JSON written by run-bundle --out")
    load.add_argument("--url", default=DEFAULT_URL, help=f"the orchestrator ({DEFAULT_URL})")
    load.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")
    load.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    try:
        document = json.loads(args.file.read_text())
    except OSError as error:
        raise UserError(f"cannot read {args.file}: {error.strerror}") from None
    except ValueError as error:
        raise UserError(f"{args.file} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise UserError(f"{args.file} is not a result document (a JSON object)")
    stored = _request(
        "POST", f"{args.url.rstrip('/')}/api/results/import", _token(args), json=document
    ).json()
    print(
        f"stored {stored['device_class']} result of bundle {stored['bundle_sha256']} "
        f"for cells {', '.join(map(str, stored['cells']))} (signed by runner {stored['runner_id']})"
    )
    return 0
