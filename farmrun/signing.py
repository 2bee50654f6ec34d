"""Signatures of offline device results: Ed25519 over canonical JSON, one key pair per runner.

A runner's private signing key is made where the runner's credential file is written (``runner
register`` on the host, or ``runner enrol-offline`` by an admin, whose file is carried to the host)
and never leaves that file; the farm keeps only the public key. So neither the farm's database nor a
backup of it can sign a result that verifies. The signed payload is the canonical JSON (sorted keys, no
spaces, UTF-8, finite numbers only) of ``{"runner_id": ..., "result": <the result document>}``: a
signature made for one runner does not verify for another, and any changed number changes the payload.

A runner's bearer credential, which opens the farm's API for a live runner, is a separate secret the
farm stores as its sha256 (``credential_hash``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM = "ed25519"
SIGNATURE_KEY = "signature"
KEY_HEX_LENGTH = 64  # both keys are 32 bytes


def credential_hash(secret: str) -> str:
    """What the orchestrator stores of a runner's bearer secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key_pair() -> tuple[str, str]:
    """(private key, public key), each as 64 hex digits."""
    private = Ed25519PrivateKey.generate()
    raw = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return raw.hex(), public_key_of(raw.hex())


def public_key_of(private_hex: str) -> str:
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(private_hex))
    return private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def check_public_key(value: str) -> str:
    """``value`` when it is an Ed25519 public key in hex; ValueError saying what is wrong otherwise."""
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(value))
    except ValueError:
        raise ValueError(f"not an Ed25519 public key: {KEY_HEX_LENGTH} hex digits expected") from None
    return value.lower()


def canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _payload(runner_id: int, result: dict[str, Any]) -> bytes:
    return canonical({"runner_id": runner_id, "result": result})


def sign(result: dict[str, Any], runner_id: int, private_hex: str) -> dict[str, Any]:
    """``result`` with a ``signature`` entry added (any previous one is replaced)."""
    body = {key: value for key, value in result.items() if key != SIGNATURE_KEY}
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(private_hex))
    value = private.sign(_payload(runner_id, body)).hex()
    return {**body, SIGNATURE_KEY: {"algorithm": ALGORITHM, "runner_id": runner_id, "value": value}}


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
    if type(runner_id) is not int or not isinstance(value, str):
        raise ValueError("the signature needs an integer 'runner_id' and a string 'value'")
    return {key: item for key, item in document.items() if key != SIGNATURE_KEY}, runner_id, value


def verify(result: dict[str, Any], runner_id: int, value: str, public_hex: str) -> bool:
    """Whether ``value`` signs ``result`` for ``runner_id`` under the runner's public key."""
    try:
        public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex))
        public.verify(bytes.fromhex(value), _payload(runner_id, result))
    except (InvalidSignature, ValueError):
        return False
    return True
