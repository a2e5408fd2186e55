"""Build failures are one-line errors naming the cause and the fix (real Go toolchain and proxy)."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.build import gobuild, pins
from conformance.errors import ProvisioningError
from conformance.providers.local import preflight


def test_a_pin_the_proxy_does_not_serve_is_named_with_the_fix(tmp_path: Path) -> None:
    tool = replace(pins.TOOLS["etcd"], version="v3.6.999")
    with pytest.raises(ProvisioningError) as caught:
        gobuild.ensure_built(tool, tmp_path)
    message = caught.value.one_line()
    assert "does not serve go.etcd.io/etcd/server/v3@v3.6.999" in message
    assert "pins.py" in message
    assert "\n" not in message
    assert not gobuild.is_built(tool, tmp_path)


def test_a_failed_compile_points_at_its_log(tmp_path: Path) -> None:
    tool = replace(pins.TOOLS["etcd"], packages=("go.etcd.io/etcd/server/v3/no/such/package",))
    with pytest.raises(ProvisioningError) as caught:
        gobuild.ensure_built(tool, tmp_path)
    assert "build.log" in caught.value.fix
    assert Path(caught.value.fix.split()[-1]).exists()


def test_a_port_already_answering_is_refused() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(ProvisioningError, match=f"port 127.0.0.1:{port} for etcd is in use"):
            preflight.check_port_free("etcd", "127.0.0.1", port)
    preflight.check_port_free("etcd", "127.0.0.1", port)
