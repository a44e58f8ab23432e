"""Code shared by every service: logging, config, gRPC helpers, Redis registry, metrics."""
