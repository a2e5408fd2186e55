"""Talking to Kubernetes: clients, typed waits on watches, manifests, diagnostics."""
