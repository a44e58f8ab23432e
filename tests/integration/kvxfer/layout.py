"""The pool layout of the kvxfer tests, torch-free: the UCX intruder process imports it without torch."""

from services.common.kv_layout import KVLayout

LAYOUT = KVLayout(num_blocks=64, num_layers=2, block_size=16, num_kv_heads=2, head_dim=64)  # 32 KB blocks
