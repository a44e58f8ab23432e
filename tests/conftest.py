"""Shared fixtures: small random-weight checkpoints made once per test session."""
