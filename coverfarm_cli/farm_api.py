"""The command's calls to the orchestrator's REST API: its default address, the admin token and one
request, whose failure is one line (``UserError``). Every sub-command that talks to the farm uses them.
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx

from coverfarm.errors import UserError
from coverfarm.settings import get_settings

DEFAULT_URL = "http://127.0.0.1:8000"


def _token(args: argparse.Namespace) -> str:
    token = args.token or get_settings().read_admin_token()
    if not token:
        raise UserError(
            "no admin token: pass --token, set COVERFARM_ADMIN_TOKEN, or run `coverfarm serve` here"
        )
    return str(token)


def _request(
    method: str, url: str, token: str | None = None, *, timeout: float = 30, **kwargs: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.request(method, url, headers=headers, timeout=timeout, **kwargs)
    except httpx.TransportError as error:
        raise UserError(f"cannot reach the orchestrator at {url}: {error}") from None
    if response.is_error:
        raise UserError(f"{method} {url}: {response.status_code} {_detail(response)}")
    return response


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text.strip()
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(map(str, error.get('loc', [])[1:]))}: {error.get('msg')}" for error in detail
        )
    return str(detail)
