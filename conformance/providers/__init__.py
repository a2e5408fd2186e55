"""Providers make or attach to the cluster under test, behind one small interface (see base.py)."""

from __future__ import annotations

from conformance.errors import UsageError
from conformance.providers.base import Cluster, Provider, ProviderStatus

PROVIDERS = ("local", "existing")

__all__ = ["PROVIDERS", "Cluster", "Provider", "ProviderStatus", "get_provider"]


def get_provider(name: str, **options: object) -> Provider:
    """The provider called `name`; unknown names are a usage error before anything happens."""
    if name == "local":
        from conformance.providers.local.provider import LocalProvider  # noqa: PLC0415

        return LocalProvider()
    if name == "existing":
        from conformance.providers.existing import ExistingProvider  # noqa: PLC0415

        return ExistingProvider(kubeconfig=options.get("kubeconfig"), context=options.get("context"))  # type: ignore[arg-type]
    raise UsageError(f"unknown provider {name!r}", f"choose one of: {', '.join(PROVIDERS)}")
