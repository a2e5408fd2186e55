"""Renewing the web identity token the AWS CLI and SDKs exchange for new role sessions, against a local
HTTP server that answers as GitHub's OIDC token endpoint does. Whether AWS accepts GitHub's real
tokens for the role is a matter of the trust policy (docs/eks.md) and is not checked here."""

from __future__ import annotations

import json
import stat
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conformance.errors import EXIT_ENVIRONMENT, EXIT_USAGE
from conformance.providers import eks_credentials
from conformance.providers.eks_credentials import keep_fresh, token_url, write_token

BEARER = "runtime-request-token"


class GitHub(BaseHTTPRequestHandler):
    """Hands out numbered tokens to the right bearer for the sts audience, as GitHub's endpoint does."""

    issued = 0

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if self.headers.get("Authorization") != f"bearer {BEARER}" or query.get("audience") != [
            "sts.amazonaws.com"
        ]:
            self.send_response(401)
            self.end_headers()
            return
        type(self).issued += 1
        body = json.dumps({"count": 1, "value": f"jwt-{type(self).issued}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    GitHub.issued = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), GitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/_apis/oidc/token?api-version=2.0"
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", url)
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", BEARER)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # a proxy of the machine's must not answer for GitHub
    yield url
    server.shutdown()


def test_the_audience_joins_githubs_own_query() -> None:
    assert (
        token_url("https://x/token?api-version=2.0")
        == "https://x/token?api-version=2.0&audience=sts.amazonaws.com"
    )
    assert token_url("https://x/token") == "https://x/token?audience=sts.amazonaws.com"


def test_main_writes_a_token_only_the_user_can_read(github: str, tmp_path: Path) -> None:
    path = tmp_path / "token"
    assert eks_credentials.main([str(path)]) == 0
    assert path.read_text() == "jwt-1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_keep_fresh_replaces_the_token_each_round_and_survives_a_failed_one(tmp_path: Path) -> None:
    path = tmp_path / "token"
    write_token(path, "first")
    answers = iter(["second", OSError("connection reset"), "fourth"])
    waited: list[float] = []

    def fetch() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    seen = []
    keep_fresh(
        path, fetch, every_s=120, sleep=lambda s: (waited.append(s), seen.append(path.read_text())), rounds=3
    )
    assert seen == ["first", "second", "second"], "a failed renewal keeps the previous token"
    assert path.read_text() == "fourth"
    assert waited == [120, 120, 120] and max(waited) < 300, "renewed well inside a token's 5 minutes"


def test_without_id_token_permission_it_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ACTIONS_ID_TOKEN_REQUEST_URL", raising=False)
    monkeypatch.delenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", raising=False)
    assert eks_credentials.main([str(tmp_path / "token")]) == EXIT_USAGE
    assert "id-token: write" in capsys.readouterr().err
    assert not (tmp_path / "token").exists()


def test_a_refused_request_is_an_environment_error_in_one_line(
    github: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "not-the-jobs")
    assert eks_credentials.main([str(tmp_path / "token")]) == EXIT_ENVIRONMENT
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "token").exists()
