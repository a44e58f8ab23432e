from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KVLayout(_message.Message):
    __slots__ = ("num_blocks", "num_layers", "block_size", "num_kv_heads", "head_dim", "dtype")
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    num_blocks: int
    num_layers: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    def __init__(self, num_blocks: _Optional[int] = ..., num_layers: _Optional[int] = ..., block_size: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., dtype: _Optional[str] = ...) -> None: ...

class KVHandle(_message.Message):
    __slots__ = ("instance_id", "kvxfer_address", "lease_id", "block_ids", "num_tokens", "layout", "lease_expiry", "shards", "block_hashes")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    KVXFER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    kvxfer_address: str
    lease_id: str
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    num_tokens: int
    layout: KVLayout
    lease_expiry: float
    shards: _containers.RepeatedCompositeFieldContainer[KVShard]
    block_hashes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, instance_id: _Optional[str] = ..., kvxfer_address: _Optional[str] = ..., lease_id: _Optional[str] = ..., block_ids: _Optional[_Iterable[int]] = ..., num_tokens: _Optional[int] = ..., layout: _Optional[_Union[KVLayout, _Mapping]] = ..., lease_expiry: _Optional[float] = ..., shards: _Optional[_Iterable[_Union[KVShard, _Mapping]]] = ..., block_hashes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class KVShard(_message.Message):
    __slots__ = ("pool_id", "rank", "layer_start", "num_layers", "kv_head_start", "num_kv_heads", "kvxfer_address", "lease_id", "lease_instance_id")
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LAYER_START_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    KV_HEAD_START_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    KVXFER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    pool_id: str
    rank: int
    layer_start: int
    num_layers: int
    kv_head_start: int
    num_kv_heads: int
    kvxfer_address: str
    lease_id: str
    lease_instance_id: str
    def __init__(self, pool_id: _Optional[str] = ..., rank: _Optional[int] = ..., layer_start: _Optional[int] = ..., num_layers: _Optional[int] = ..., kv_head_start: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., kvxfer_address: _Optional[str] = ..., lease_id: _Optional[str] = ..., lease_instance_id: _Optional[str] = ...) -> None: ...
