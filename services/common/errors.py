"""Errors the services raise that map onto gRPC statuses (see grpc_errors.abort_for)."""


class Overloaded(RuntimeError):
    """The instance's queue is full (RESOURCE_EXHAUSTED / HTTP 429)."""
