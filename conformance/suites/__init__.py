"""The conformance suites: one module per area. They see a cluster, never which provider made it."""
