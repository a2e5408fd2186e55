"""The build floor: pinned versions, Go builds from the module proxy, images built on this machine,
and the cache that keeps them, shared by every provider and installer (kind node images too)."""
