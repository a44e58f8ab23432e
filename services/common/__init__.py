"""The torch-free core every layer shares (imports nothing of distserve's but the protobuf stubs). By theme:

- security: `secret` (the deployment secret), `auth` (a principal and its token on every internal call), `tls`,
  `links` (the one way to make internal servers and channels), `local_socket`, `api_keys`, `front_door`,
  `redis_auth`.
- Redis: `registry` (instances, load book, request records), `registry_cache` (the prefix-cache index),
  `redis_server` (the embedded server), `redis_breaker` (a circuit breaker over a Redis client).
- wire types and request facts: `sampling`, `slo`, `stamps` (a request's timestamps), `errors` (the one error →
  status table), `validation`, `convert` (protobuf ⇄ dataclasses), `prefix_hash`.
- the latency model: `step_model/` (fit and predict, one home for the planner, the router's admission and the
  bench; its `__init__` lists its modules).
- model facts: `model_config` (with `moe_config`, `mla_config`, `yarn`), `generation_config`, `tokenizer`, `chat_template`,
  `grammars`, `kv_layout`, `kv_groups` (layers grouped by how long their K/V is kept).
- settings: `defaults` (one default per setting), `engine_settings`, `settings_cli` (settings as flags).
- processes and hosts: `logs`, `metrics`, `net`, `lifetime` (children die with their parent), `pool_files`
  (KV pool files in /dev/shm), `cuda_ipc`, `cbuild` (C kernels compiled on first use), `step_journal`, `devices`
  (device strings: the cores of `cpu:a-b`, device lists).
- KV pools: `pool_site` (one pool: its layout, what of the model it holds, where it lies; its wire forms), `span` (a
  range of layers, KV heads or columns).
"""
