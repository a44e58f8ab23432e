"""distserve: LLM serving with prefill and decode disaggregated, as gRPC services."""
