"""The local provider's health check for a unix socket: something must be listening on it."""

from __future__ import annotations

import socket
from pathlib import Path

from conformance.providers.local.provider import _accepts_connections


def test_a_socket_file_nobody_listens_on_is_not_healthy(tmp_path: Path) -> None:
    path = tmp_path / "left-behind.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # the file stays after close, as after a SIGKILL
    assert path.is_socket()
    assert not _accepts_connections(path)


def test_a_listening_socket_is_healthy(tmp_path: Path) -> None:
    path = tmp_path / "live.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(path))
        live.listen(1)
        assert _accepts_connections(path)


def test_no_file_is_not_healthy(tmp_path: Path) -> None:
    assert not _accepts_connections(tmp_path / "absent.sock")
