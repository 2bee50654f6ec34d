"""Slow and idle connections against a real ``coverfarm serve`` (the embedded default), over real sockets:
a client that sends its request head a line at a time, or nothing, is answered 408 and cut off after the
header bound, others are served meanwhile, and a server out of open files says so once per interval
instead of a traceback for every failed accept()."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from farmkit import TOKEN, start_server, stop, wait_for

HEADER_TIMEOUT_S = 2.0


@pytest.fixture
def embedded_env(tmp_path: Path) -> dict[str, str]:
    return {
        "COVERFARM_HOME": str(tmp_path / "home"),
        "COVERFARM_ADMIN_TOKEN": TOKEN,
        "COVERFARM_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
    }


def connect(url: str, count: int) -> list[socket.socket]:
    host, port = url.removeprefix("http://").split(":")
    return [socket.create_connection((host, int(port)), timeout=5) for _ in range(count)]


def begin_requests(sockets: list[socket.socket]) -> None:
    """Send each socket a request line and one header: a request head begun, not ended."""
    for sock in sockets:
        sock.sendall(b"GET /api/sweeps HTTP/1.1\r\nHost: farm\r\n")
        sock.setblocking(False)


def trickle_until_closed(
    sockets: list[socket.socket], seconds: float, every_s: float = 0.5
) -> dict[int, float]:
    """Send each socket (its request head begun) a header line every ``every_s``, for up to
    ``seconds``; {index: seconds until the server closed it} for those it closed, each having answered
    408."""
    start = time.monotonic()
    closed: dict[int, float] = {}
    answers: dict[int, bytes] = {index: b"" for index in range(len(sockets))}
    while time.monotonic() - start < seconds and len(closed) < len(sockets):
        open_ones = [index for index in range(len(sockets)) if index not in closed]
        readable, _, _ = select.select([sockets[index] for index in open_ones], [], [], every_s)
        for index in open_ones:
            sock = sockets[index]
            if sock in readable:
                try:
                    data = sock.recv(4096)
                except ConnectionResetError:
                    data = b""
                answers[index] += data
                if not data:
                    closed[index] = time.monotonic() - start
                    continue
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.send(b"X-Slow: 1\r\n")
    for index in closed:
        assert answers[index].startswith(b"HTTP/1.1 408"), answers[index][:100]
    return closed


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


@pytest.fixture
def served(embedded_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    process, url = start_server(embedded_env, tmp_path / "serve.log")
    yield url
    stop(process)


def test_a_slow_request_head_is_cut_off_and_others_are_served_meanwhile(served: str) -> None:
    slow = connect(served, 40)
    idle = connect(served, 10)  # never send a byte
    try:
        begin_requests(slow)
        with httpx.Client(base_url=served, timeout=5) as api:
            assert api.get("/api/sweeps").status_code == 200  # served while the slow ones wait
        closed = trickle_until_closed(slow, seconds=HEADER_TIMEOUT_S + 8)
        assert len(closed) == len(slow), f"{len(slow) - len(closed)} slow clients still connected"
        assert max(closed.values()) < HEADER_TIMEOUT_S + 4
        for sock in idle:
            sock.settimeout(5)
            assert sock.recv(4096).startswith(b"HTTP/1.1 408")
    finally:
        close_all(slow + idle)


def test_a_connection_idle_after_its_response_is_closed(served: str) -> None:
    (sock,) = connect(served, 1)
    try:
        sock.sendall(b"GET /api/sweeps HTTP/1.1\r\nHost: farm\r\n\r\n")
        sock.settimeout(HEADER_TIMEOUT_S + 8)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")  # then closed, idle, instead of kept for ever
    finally:
        sock.close()


def test_a_server_out_of_open_files_says_so_once_per_interval(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    process, url = start_server(embedded_env, log, open_files=256)
    sockets: list[socket.socket] = []
    try:
        sockets = connect(url, 400)  # more than the server can hold: the rest wait in its backlog
        time.sleep(HEADER_TIMEOUT_S * 0.75)
        said = log.read_text(errors="replace").count("Too many open files")
        assert said <= 2, f"'Too many open files' {said} times in {HEADER_TIMEOUT_S * 0.75:g} s"
        assert "cannot accept connections" in log.read_text(errors="replace")

        def served() -> bool:
            try:
                return httpx.get(f"{url}/api/sweeps", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        # The silent ones are cut off after the header bound, and the server takes clients again.
        wait_for(served, 30, "the server to serve again")
    finally:
        close_all(sockets)
        stop(process)
