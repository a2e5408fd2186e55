"""Providers make or attach to the cluster under test, behind one small interface (see base.py)."""

from __future__ import annotations

from conformance.errors import UsageError
from conformance.providers.base import Cluster, Provider, ProviderStatus

PROVIDERS = ("local", "existing", "kind", "eks")

__all__ = ["PROVIDERS", "Cluster", "Provider", "ProviderStatus", "get_provider"]


def get_provider(name: str, **options: object) -> Provider:
    """The provider called `name`; unknown names are a usage error before anything happens."""
    if name == "local":
        from conformance.providers.local.provider import LocalProvider  # noqa: PLC0415

        # Worker nodes for a new cluster: the profile's (KRC_LOCAL_NODES overrides them).
        return LocalProvider(profile_nodes=options.get("local_nodes"))  # type: ignore[arg-type]
    if name == "existing":
        from conformance.providers.existing import ExistingProvider  # noqa: PLC0415

        return ExistingProvider(kubeconfig=options.get("kubeconfig"), context=options.get("context"))  # type: ignore[arg-type]
    if name in ("kind", "eks"):
        # Terraform-made clusters: one workspace per run, kept only when the run asks for it.
        from conformance.providers.eks import EksProvider  # noqa: PLC0415
        from conformance.providers.kind import KindProvider  # noqa: PLC0415

        made = KindProvider if name == "kind" else EksProvider
        run_id = options.get("run_id")
        return made(run_id=str(run_id) if run_id else None, keep_cluster=bool(options.get("keep_cluster")))
    raise UsageError(f"unknown provider {name!r}", f"choose one of: {', '.join(PROVIDERS)}")
