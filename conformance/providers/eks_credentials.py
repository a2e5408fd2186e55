"""AWS credentials for a GitHub Actions job that outlasts one role session.

aws-actions/configure-aws-credentials exchanges one OIDC token for one role session and exports its
keys; when the session ends (1 hour unless the role's MaxSessionDuration was raised) every `aws` call
fails, `aws eks get-token` included, so the harness loses the cluster mid-run and `terraform destroy`
cannot run. The AWS CLI and SDKs renew a session themselves when given a role and a file holding a
web identity token (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE): each time theirs expires they call
AssumeRoleWithWebIdentity with whatever token the file holds then. GitHub's tokens live 5 minutes,
so this keeps a fresh one in that file for as long as the job runs (the request token GitHub gives a
job lasts the job).

    python -m conformance.providers.eks_credentials FILE           writes a token once (fails loudly)
    python -m conformance.providers.eks_credentials FILE --keep    then renews it every REFRESH_S

Needs `permissions: id-token: write` (GitHub then sets ACTIONS_ID_TOKEN_REQUEST_URL and
ACTIONS_ID_TOKEN_REQUEST_TOKEN). The token is the job's identity: the file is the runner user's only.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from conformance.errors import EXIT_ENVIRONMENT, EXIT_USAGE

AUDIENCE = "sts.amazonaws.com"  # what the role's trust policy checks (docs/eks.md)
REFRESH_S = 120.0  # well inside a token's 5 minutes, so a renewal never reads an expired one
TIMEOUT_S = 30.0


def token_url(request_url: str, audience: str = AUDIENCE) -> str:
    """GitHub's request URL already carries a query (api-version); the audience is added to it."""
    separator = "&" if urllib.parse.urlsplit(request_url).query else "?"
    return f"{request_url}{separator}audience={urllib.parse.quote(audience, safe='')}"


def fetch_token(request_url: str, request_token: str) -> str:
    request = urllib.request.Request(
        token_url(request_url), headers={"Authorization": f"bearer {request_token}"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        value = json.load(answer).get("value")
    if not isinstance(value, str) or not value:
        raise ValueError("GitHub's answer holds no token")
    return value


def write_token(path: Path, token: str) -> None:
    """Whole or not at all (a reader never sees half a token), readable by this user only."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(token)
    partial.chmod(0o600)
    partial.rename(path)


def keep_fresh(
    path: Path,
    fetch: Callable[[], str],
    every_s: float = REFRESH_S,
    sleep: Callable[[float], None] = time.sleep,
    rounds: int | None = None,
) -> None:
    """Renew the token every `every_s`; a failed renewal keeps the old one and says so (the next
    round may work, and the old one is still valid for a few minutes)."""
    done = 0
    while rounds is None or done < rounds:
        sleep(every_s)
        try:
            write_token(path, fetch())
        except (OSError, ValueError) as exc:
            print(
                f"eks-credentials: renewal failed, keeping the previous token: {exc}",
                file=sys.stderr,
                flush=True,
            )
        done += 1


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0].startswith("-") or any(a != "--keep" for a in argv[1:]):
        print("usage: python -m conformance.providers.eks_credentials FILE [--keep]", file=sys.stderr)
        return EXIT_USAGE
    url, bearer = (
        os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"),
        os.environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN"),
    )
    if not url or not bearer:
        print(
            "eks-credentials: GitHub offers this job no OIDC token: give it `permissions: id-token: write`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    path = Path(argv[0])
    try:
        write_token(path, fetch_token(url, bearer))
    except (OSError, ValueError) as exc:
        print(f"eks-credentials: no OIDC token from GitHub ({exc}): retry the job", file=sys.stderr)
        return EXIT_ENVIRONMENT
    if "--keep" in argv[1:]:
        keep_fresh(path, lambda: fetch_token(url, bearer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
