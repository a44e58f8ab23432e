"""One default for each cache, scheduler and hand-off setting; every config that carries one takes it from here."""

BLOCK_SIZE = 16  # tokens per KV block
NUM_BLOCKS = 1024  # KV blocks in an instance's pool
MAX_BATCH_TOKENS = 512  # Lm for prefill; the token budget per step for colocated and chunked
MAX_NUM_SEQS = 64  # most sequences in one batch
LEASE_TTL_S = 30.0  # how long prefilled K/V waits for a pull
DRAIN_GRACE_S = 30.0  # on SIGTERM: how long in-flight requests get to finish (launcher, compose, services)
PULL_TIMEOUT_S = 10.0  # the decode instance's bound on one K/V pull
