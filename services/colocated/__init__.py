"""Colocated and chunked-prefill instances: the baselines, each request whole on one engine."""
