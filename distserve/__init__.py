"""Generated protobuf and gRPC stubs (package `distserve.v1`); regenerate with scripts/gen_protos.py."""
