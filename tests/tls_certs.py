"""The tests' certificate authorities: the benchmarks' self-signed ones (services/bench/self_signed.py)."""

from services.bench.self_signed import Authority

__all__ = ["Authority"]
