"""Signatures of offline device results: HMAC-SHA256 over canonical JSON, keyed by the runner's credential.

The orchestrator stores a runner's credential only as its sha256, so that sha256 is the HMAC key: the
runner derives it from its secret, the orchestrator reads it from its table, and the secret itself is
never stored server-side. The signed payload is the canonical JSON (sorted keys, no spaces, UTF-8) of
``{"runner_id": ..., "result": <the result document>}``: a signature made for one runner does not verify
for another, and any changed number changes the payload.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

ALGORITHM = "hmac-sha256"
SIGNATURE_KEY = "signature"


def credential_hash(secret: str) -> str:
    """What the orchestrator stores of a runner's secret, and the HMAC key of its signatures."""
    return hashlib.sha256(secret.encode()).hexdigest()


def canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _mac(key_hex: str, runner_id: int, result: dict[str, Any]) -> str:
    payload = canonical({"runner_id": runner_id, "result": result})
    return hmac.new(key_hex.encode(), payload, hashlib.sha256).hexdigest()


def sign(result: dict[str, Any], runner_id: int, secret: str) -> dict[str, Any]:
    """``result`` with a ``signature`` entry added (any previous one is replaced)."""
    body = {key: value for key, value in result.items() if key != SIGNATURE_KEY}
    mac = _mac(credential_hash(secret), runner_id, body)
    return {**body, SIGNATURE_KEY: {"algorithm": ALGORITHM, "runner_id": runner_id, "value": mac}}


def split(document: dict[str, Any]) -> tuple[dict[str, Any], int, str]:
    """(result without its signature, runner id, signature value); ValueError when unsigned or malformed."""
    signature = document.get(SIGNATURE_KEY)
    if not isinstance(signature, dict):
        raise ValueError(
            "the result is not signed (no 'signature'); run-bundle signs when a runner is enrolled"
        )
    if signature.get("algorithm") != ALGORITHM:
        raise ValueError(f"unknown signature algorithm {signature.get('algorithm')!r}; expected {ALGORITHM}")
    runner_id, value = signature.get("runner_id"), signature.get("value")
    if not isinstance(runner_id, int) or not isinstance(value, str):
        raise ValueError("the signature needs an integer 'runner_id' and a string 'value'")
    return {key: item for key, item in document.items() if key != SIGNATURE_KEY}, runner_id, value


def verify(result: dict[str, Any], runner_id: int, value: str, key_hex: str) -> bool:
    """Whether ``value`` signs ``result`` for ``runner_id`` under the stored credential hash ``key_hex``."""
    return hmac.compare_digest(_mac(key_hex, runner_id, result), value)
