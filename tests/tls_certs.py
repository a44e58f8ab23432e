"""The tests' certificate authorities: the benchmarks' self-signed ones (benchmarks/self_signed.py)."""

from benchmarks.self_signed import Authority

__all__ = ["Authority"]
