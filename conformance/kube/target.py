"""The one way to reach a cluster: a kubeconfig and a context, the same for every client.

The Python client, helm and kubectl must all talk to the same cluster; on a machine with several
clusters, a helm that used the kubeconfig's current context while the Python client used
`--context` would install into the wrong one. Everything that spawns helm or kubectl takes its
flags from here, and every Python client is made here, with client-side timeouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config


@dataclass(frozen=True)
class KubeTarget:
    kubeconfig: Path
    context: str | None = None  # None: the kubeconfig's current context, for every client alike

    def helm_args(self) -> list[str]:
        return [
            "--kubeconfig",
            str(self.kubeconfig),
            *(["--kube-context", self.context] if self.context else []),
        ]

    def kubectl_args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig), *(["--context", self.context] if self.context else [])]

    def shell_env(self) -> dict[str, str]:
        """What a shell needs so helm reaches this cluster (kubectl reads no context variable:
        `cluster env` adds an alias for it)."""
        env = {"KUBECONFIG": str(self.kubeconfig)}
        if self.context:
            env["HELM_KUBECONTEXT"] = self.context
        return env


# No API call waits longer than this for the connection or for the next byte of an answer; a
# watch waits for its own server-side timeout plus WATCH_GRACE_S. Without a client-side timeout
# a connection lost without a FIN (a node gone, a NAT entry expired) hangs a request forever.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 120.0
WATCH_GRACE_S = 30.0
WATCH_READ_TIMEOUT_S = 300.0  # a watch that names no timeoutSeconds


def api_client(target: KubeTarget) -> client.ApiClient:
    """A Python client for `target`, every request of which has a client-side timeout."""
    api = config.new_client_from_config(str(target.kubeconfig), context=target.context)
    return with_request_timeouts(api)


def with_request_timeouts(api: client.ApiClient) -> client.ApiClient:
    """Give every request of `api` that names no `_request_timeout` the default one."""
    rest = api.rest_client
    send = rest.request
    if getattr(send, "krc_timeouts", False):
        return api

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = default_timeout(kwargs.get("query_params") or [])
        return send(method, url, *args, **kwargs)

    request.krc_timeouts = True  # type: ignore[attr-defined]
    rest.request = request
    return api


def default_timeout(query_params: list[tuple[str, Any]]) -> tuple[float, float]:
    """(connect, read) seconds for a request with these query parameters."""
    params = dict(query_params)
    if str(params.get("watch", "")).lower() == "true":
        server_side = params.get("timeoutSeconds")
        read = float(server_side) + WATCH_GRACE_S if server_side else WATCH_READ_TIMEOUT_S
        return CONNECT_TIMEOUT_S, read
    return CONNECT_TIMEOUT_S, READ_TIMEOUT_S
