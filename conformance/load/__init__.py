"""Open-model load: a constant arrival rate sent from inside the cluster, and its analysis.

`generator` runs vegeta in a Guaranteed-QoS pod and brings back one record per request;
`records` turns vegeta's output into `Record`s and names each error's kind; `analysis` is
pure arithmetic over records (achieved rate and its self-check, per-second timeline, error
kinds, latency percentiles, which backend answered).
"""
