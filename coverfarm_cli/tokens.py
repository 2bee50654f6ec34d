"""``coverfarm token create``: a one-time enrolment token for a new device runner (admin)."""

from __future__ import annotations

import argparse
import sys

from coverfarm.errors import UserError
from coverfarm_cli.farm_api import DEFAULT_URL, _request, _token


def register(sub: argparse._SubParsersAction) -> None:
    token = sub.add_parser("token", help="enrolment tokens for device runners").add_subparsers(
        dest="token_command", required=True, metavar="TOKEN_COMMAND"
    )
    create = token.add_parser("create", help="a one-time enrolment token (printed once)")
    create.add_argument("--expires", type=float, help="seconds until it expires (the farm's default, 1 day)")
    create.add_argument("--url", default=DEFAULT_URL, help=f"the orchestrator ({DEFAULT_URL})")
    create.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")
    create.set_defaults(func=run_create)


def run_create(args: argparse.Namespace) -> int:
    body = {}
    if args.expires is not None:
        if args.expires <= 0:
            raise UserError(f"--expires must be positive, got {args.expires:g}")
        body["expires_in_s"] = args.expires
    issued = _request("POST", f"{args.url.rstrip('/')}/api/enrolment-tokens", _token(args), json=body).json()
    usage = "coverfarm runner register --url URL --token TOKEN"
    print(f"expires at {issued['expires_at']}; use it once: {usage}", file=sys.stderr)
    print(issued["token"])
    return 0
