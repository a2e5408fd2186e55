"""Artifacts the harness builds for providers other than the local one (kind node images)."""
