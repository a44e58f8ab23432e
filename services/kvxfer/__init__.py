"""kvxfer: the per-host KV-cache transfer service (lease authority, same-host copies, UCX pulls)."""
