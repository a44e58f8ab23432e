from distserve.v1 import kv_pb2 as _kv_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CudaIpcHandle(_message.Message):
    __slots__ = ("handle", "offset", "device_index")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DEVICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    handle: bytes
    offset: int
    device_index: int
    def __init__(self, handle: _Optional[bytes] = ..., offset: _Optional[int] = ..., device_index: _Optional[int] = ...) -> None: ...

class RegisterPoolRequest(_message.Message):
    __slots__ = ("instance_id", "layout", "device", "shm_path", "cuda_ipc", "owner")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    SHM_PATH_FIELD_NUMBER: _ClassVar[int]
    CUDA_IPC_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    layout: _kv_pb2.KVLayout
    device: str
    shm_path: str
    cuda_ipc: CudaIpcHandle
    owner: str
    def __init__(self, instance_id: _Optional[str] = ..., layout: _Optional[_Union[_kv_pb2.KVLayout, _Mapping]] = ..., device: _Optional[str] = ..., shm_path: _Optional[str] = ..., cuda_ipc: _Optional[_Union[CudaIpcHandle, _Mapping]] = ..., owner: _Optional[str] = ...) -> None: ...

class RegisterPoolResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnregisterPoolRequest(_message.Message):
    __slots__ = ("instance_id",)
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    def __init__(self, instance_id: _Optional[str] = ...) -> None: ...

class UnregisterPoolResponse(_message.Message):
    __slots__ = ("dropped_leases",)
    DROPPED_LEASES_FIELD_NUMBER: _ClassVar[int]
    dropped_leases: int
    def __init__(self, dropped_leases: _Optional[int] = ...) -> None: ...

class CreateLeaseRequest(_message.Message):
    __slots__ = ("instance_id", "block_ids", "num_tokens", "ttl_s", "pulls")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    PULLS_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    num_tokens: int
    ttl_s: float
    pulls: int
    def __init__(self, instance_id: _Optional[str] = ..., block_ids: _Optional[_Iterable[int]] = ..., num_tokens: _Optional[int] = ..., ttl_s: _Optional[float] = ..., pulls: _Optional[int] = ...) -> None: ...

class WatchLeasesRequest(_message.Message):
    __slots__ = ("instance_id",)
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    def __init__(self, instance_id: _Optional[str] = ...) -> None: ...

class LeaseEvent(_message.Message):
    __slots__ = ("lease_id", "instance_id", "block_ids", "reason")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REASON_UNSPECIFIED: _ClassVar[LeaseEvent.Reason]
        RELEASED: _ClassVar[LeaseEvent.Reason]
        EXPIRED: _ClassVar[LeaseEvent.Reason]
    REASON_UNSPECIFIED: LeaseEvent.Reason
    RELEASED: LeaseEvent.Reason
    EXPIRED: LeaseEvent.Reason
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    instance_id: str
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    reason: LeaseEvent.Reason
    def __init__(self, lease_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., block_ids: _Optional[_Iterable[int]] = ..., reason: _Optional[_Union[LeaseEvent.Reason, str]] = ...) -> None: ...

class Credential(_message.Message):
    __slots__ = ("principal", "token")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    principal: str
    token: str
    def __init__(self, principal: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("source", "dst_instance_id", "dst_block_ids", "checksum", "timeout_s", "credential")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DST_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    DST_BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    source: _kv_pb2.KVHandle
    dst_instance_id: str
    dst_block_ids: _containers.RepeatedScalarFieldContainer[int]
    checksum: bool
    timeout_s: float
    credential: Credential
    def __init__(self, source: _Optional[_Union[_kv_pb2.KVHandle, _Mapping]] = ..., dst_instance_id: _Optional[str] = ..., dst_block_ids: _Optional[_Iterable[int]] = ..., checksum: _Optional[bool] = ..., timeout_s: _Optional[float] = ..., credential: _Optional[_Union[Credential, _Mapping]] = ...) -> None: ...

class RangeCopy(_message.Message):
    __slots__ = ("src_pool_id", "dst_pool_id", "src_offsets", "dst_offsets", "lengths")
    SRC_POOL_ID_FIELD_NUMBER: _ClassVar[int]
    DST_POOL_ID_FIELD_NUMBER: _ClassVar[int]
    SRC_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    src_pool_id: str
    dst_pool_id: str
    src_offsets: bytes
    dst_offsets: bytes
    lengths: bytes
    def __init__(self, src_pool_id: _Optional[str] = ..., dst_pool_id: _Optional[str] = ..., src_offsets: _Optional[bytes] = ..., dst_offsets: _Optional[bytes] = ..., lengths: _Optional[bytes] = ...) -> None: ...

class PullRangesRequest(_message.Message):
    __slots__ = ("source", "copies", "checksum", "timeout_s", "lease_share", "credential")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    LEASE_SHARE_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    source: _kv_pb2.KVHandle
    copies: _containers.RepeatedCompositeFieldContainer[RangeCopy]
    checksum: bool
    timeout_s: float
    lease_share: int
    credential: Credential
    def __init__(self, source: _Optional[_Union[_kv_pb2.KVHandle, _Mapping]] = ..., copies: _Optional[_Iterable[_Union[RangeCopy, _Mapping]]] = ..., checksum: _Optional[bool] = ..., timeout_s: _Optional[float] = ..., lease_share: _Optional[int] = ..., credential: _Optional[_Union[Credential, _Mapping]] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("bytes", "seconds", "path", "crc32")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    seconds: float
    path: str
    crc32: int
    def __init__(self, bytes: _Optional[int] = ..., seconds: _Optional[float] = ..., path: _Optional[str] = ..., crc32: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("pools", "live_leases", "pulls_in_flight", "pulls_ok", "pulls_failed", "bytes_pulled", "leases_expired", "leases_released")
    POOLS_FIELD_NUMBER: _ClassVar[int]
    LIVE_LEASES_FIELD_NUMBER: _ClassVar[int]
    PULLS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PULLS_OK_FIELD_NUMBER: _ClassVar[int]
    PULLS_FAILED_FIELD_NUMBER: _ClassVar[int]
    BYTES_PULLED_FIELD_NUMBER: _ClassVar[int]
    LEASES_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    LEASES_RELEASED_FIELD_NUMBER: _ClassVar[int]
    pools: int
    live_leases: int
    pulls_in_flight: int
    pulls_ok: int
    pulls_failed: int
    bytes_pulled: int
    leases_expired: int
    leases_released: int
    def __init__(self, pools: _Optional[int] = ..., live_leases: _Optional[int] = ..., pulls_in_flight: _Optional[int] = ..., pulls_ok: _Optional[int] = ..., pulls_failed: _Optional[int] = ..., bytes_pulled: _Optional[int] = ..., leases_expired: _Optional[int] = ..., leases_released: _Optional[int] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("host_id", "ucx_host", "ucx_port")
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    UCX_HOST_FIELD_NUMBER: _ClassVar[int]
    UCX_PORT_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    ucx_host: str
    ucx_port: int
    def __init__(self, host_id: _Optional[str] = ..., ucx_host: _Optional[str] = ..., ucx_port: _Optional[int] = ...) -> None: ...
