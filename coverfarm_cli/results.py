"""``coverfarm results import FILE``: store a signed offline device result (admin)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from coverfarm.errors import UserError
from coverfarm_cli import offline
from coverfarm_cli.farm_api import DEFAULT_URL, _request, _token

IMPORT_TIMEOUT_S = 900


def register(sub: argparse._SubParsersAction) -> None:
    results = sub.add_parser("results", help="device results made offline").add_subparsers(
        dest="results_command", required=True, metavar="RESULTS_COMMAND"
    )
    load = results.add_parser(
        "import",
        help="verify signed `runner run-bundle` results and store them as their cells' device results",
    )
    load.add_argument(
        "file",
        type=Path,
        metavar="PATH",
        help="a result JSON written by run-bundle --out, or a directory of them (stored all or none)",
    )
    load.add_argument("--url", default=DEFAULT_URL, help=f"the orchestrator ({DEFAULT_URL})")
    load.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")
    load.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    if args.file.is_dir():
        documents = offline.read_results(args.file)
        # One request, stored in one transaction (all or none), under the orchestrator's import limit
        # (COVERFARM_MAX_IMPORT_BYTES): hundreds of results take a while to verify and store.
        stored = _request(
            "POST",
            f"{args.url.rstrip('/')}/api/results/import-batch",
            _token(args),
            json={"results": documents},
            timeout=IMPORT_TIMEOUT_S,
        ).json()["imported"]
        for item in stored:
            _say(item)
        print(f"stored {len(stored)} results from {args.file}")
        return 0
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
    _say(stored)
    return 0


def _say(stored: dict[str, Any]) -> None:
    cells = ", ".join(map(str, stored["cells"]))
    what = (
        f"eager baseline for {stored['device_class']}"
        if stored.get("kind") == "baseline"
        else f"{stored['device_class']} result of bundle {stored['bundle_sha256']}"
    )
    print(f"stored {what} for cells {cells} (signed by runner {stored['runner_id']})")
