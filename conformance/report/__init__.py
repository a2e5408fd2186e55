"""Results of a run: summary.json (the machine-readable contract) and the reports built from it."""
