"""The lab: one-question measurements, each `python -m benchmarks.NAME`; not shipped in the wheel (README.md)."""
