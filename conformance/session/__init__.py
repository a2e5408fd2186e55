"""One conformance run inside pytest: its setup (built once per run), and the halves of the session."""
