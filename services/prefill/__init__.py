"""Prefill instances: FCFS, Lm batching, first token; the K/V waits in the pool under a lease until pulled."""
