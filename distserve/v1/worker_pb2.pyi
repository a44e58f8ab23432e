from distserve.v1 import kv_pb2 as _kv_pb2
from distserve.v1 import logprobs_pb2 as _logprobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "top_k", "seed", "ignore_eos", "stop_token_ids", "logprobs", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "min_tokens", "prompt_logprobs", "grammar", "resumed_tokens")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    RESUMED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    ignore_eos: bool
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: int
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    logit_bias: _containers.ScalarMap[int, float]
    min_tokens: int
    prompt_logprobs: int
    grammar: str
    resumed_tokens: int
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., min_tokens: _Optional[int] = ..., prompt_logprobs: _Optional[int] = ..., grammar: _Optional[str] = ..., resumed_tokens: _Optional[int] = ...) -> None: ...

class Stamps(_message.Message):
    __slots__ = ("prefill_queued", "prefill_start", "prefill_end", "xfer_start", "xfer_end", "decode_queued", "decode_start")
    PREFILL_QUEUED_FIELD_NUMBER: _ClassVar[int]
    PREFILL_START_FIELD_NUMBER: _ClassVar[int]
    PREFILL_END_FIELD_NUMBER: _ClassVar[int]
    XFER_START_FIELD_NUMBER: _ClassVar[int]
    XFER_END_FIELD_NUMBER: _ClassVar[int]
    DECODE_QUEUED_FIELD_NUMBER: _ClassVar[int]
    DECODE_START_FIELD_NUMBER: _ClassVar[int]
    prefill_queued: float
    prefill_start: float
    prefill_end: float
    xfer_start: float
    xfer_end: float
    decode_queued: float
    decode_start: float
    def __init__(self, prefill_queued: _Optional[float] = ..., prefill_start: _Optional[float] = ..., prefill_end: _Optional[float] = ..., xfer_start: _Optional[float] = ..., xfer_end: _Optional[float] = ..., decode_queued: _Optional[float] = ..., decode_start: _Optional[float] = ...) -> None: ...

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "sampling", "pulls", "cache_namespace", "prefix")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PULLS_FIELD_NUMBER: _ClassVar[int]
    CACHE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: SamplingParams
    pulls: int
    cache_namespace: str
    prefix: _kv_pb2.KVHandle
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., pulls: _Optional[int] = ..., cache_namespace: _Optional[str] = ..., prefix: _Optional[_Union[_kv_pb2.KVHandle, _Mapping]] = ...) -> None: ...

class PrefillResponse(_message.Message):
    __slots__ = ("first_token", "finish_reason", "kv", "stamps", "logprobs", "prompt_logprobs", "cached_tokens", "pulled_blocks")
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    STAMPS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PULLED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    first_token: int
    finish_reason: str
    kv: _kv_pb2.KVHandle
    stamps: Stamps
    logprobs: _containers.RepeatedCompositeFieldContainer[_logprobs_pb2.TokenLogprobs]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_logprobs_pb2.TokenLogprobs]
    cached_tokens: int
    pulled_blocks: int
    def __init__(self, first_token: _Optional[int] = ..., finish_reason: _Optional[str] = ..., kv: _Optional[_Union[_kv_pb2.KVHandle, _Mapping]] = ..., stamps: _Optional[_Union[Stamps, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[_logprobs_pb2.TokenLogprobs, _Mapping]]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_logprobs_pb2.TokenLogprobs, _Mapping]]] = ..., cached_tokens: _Optional[int] = ..., pulled_blocks: _Optional[int] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "first_token", "sampling", "kv", "cache_namespace", "local_prefill_cap")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    CACHE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_PREFILL_CAP_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    first_token: int
    sampling: SamplingParams
    kv: _kv_pb2.KVHandle
    cache_namespace: str
    local_prefill_cap: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., first_token: _Optional[int] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., kv: _Optional[_Union[_kv_pb2.KVHandle, _Mapping]] = ..., cache_namespace: _Optional[str] = ..., local_prefill_cap: _Optional[int] = ...) -> None: ...

class LeasePrefixRequest(_message.Message):
    __slots__ = ("prompt_token_ids", "cache_namespace", "ttl_s")
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    CACHE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    cache_namespace: str
    ttl_s: float
    def __init__(self, prompt_token_ids: _Optional[_Iterable[int]] = ..., cache_namespace: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class LeasePrefixResponse(_message.Message):
    __slots__ = ("kv",)
    KV_FIELD_NUMBER: _ClassVar[int]
    kv: _kv_pb2.KVHandle
    def __init__(self, kv: _Optional[_Union[_kv_pb2.KVHandle, _Mapping]] = ...) -> None: ...

class TokenChunk(_message.Message):
    __slots__ = ("token_ids", "finish_reason", "stamps", "logprobs", "prompt_logprobs", "index", "cached_tokens", "pulled_blocks", "decode_cached_tokens")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STAMPS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PULLED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DECODE_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: str
    stamps: Stamps
    logprobs: _containers.RepeatedCompositeFieldContainer[_logprobs_pb2.TokenLogprobs]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_logprobs_pb2.TokenLogprobs]
    index: int
    cached_tokens: int
    pulled_blocks: int
    decode_cached_tokens: int
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[str] = ..., stamps: _Optional[_Union[Stamps, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[_logprobs_pb2.TokenLogprobs, _Mapping]]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_logprobs_pb2.TokenLogprobs, _Mapping]]] = ..., index: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., pulled_blocks: _Optional[int] = ..., decode_cached_tokens: _Optional[int] = ...) -> None: ...

class ColocatedRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "sampling", "n", "cache_namespace")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    CACHE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: SamplingParams
    n: int
    cache_namespace: str
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., n: _Optional[int] = ..., cache_namespace: _Optional[str] = ...) -> None: ...

class InstanceStatsRequest(_message.Message):
    __slots__ = ("steps_since",)
    STEPS_SINCE_FIELD_NUMBER: _ClassVar[int]
    steps_since: float
    def __init__(self, steps_since: _Optional[float] = ...) -> None: ...

class StepStat(_message.Message):
    __slots__ = ("kind", "seqs", "tokens", "sum_sq", "context", "start", "seconds")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUM_SQ_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    seqs: int
    tokens: int
    sum_sq: int
    context: int
    start: float
    seconds: float
    def __init__(self, kind: _Optional[str] = ..., seqs: _Optional[int] = ..., tokens: _Optional[int] = ..., sum_sq: _Optional[int] = ..., context: _Optional[int] = ..., start: _Optional[float] = ..., seconds: _Optional[float] = ...) -> None: ...

class InstanceStatsResponse(_message.Message):
    __slots__ = ("instance_id", "role", "blocks_total", "blocks_used", "waiting", "running", "held", "steps", "step_log", "blocks_cached", "computed_tokens", "prefix_cache_queried", "prefix_cache_hit")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_LOG_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_CACHED_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_QUERIED_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    role: str
    blocks_total: int
    blocks_used: int
    waiting: int
    running: int
    held: int
    steps: int
    step_log: _containers.RepeatedCompositeFieldContainer[StepStat]
    blocks_cached: int
    computed_tokens: int
    prefix_cache_queried: int
    prefix_cache_hit: int
    def __init__(self, instance_id: _Optional[str] = ..., role: _Optional[str] = ..., blocks_total: _Optional[int] = ..., blocks_used: _Optional[int] = ..., waiting: _Optional[int] = ..., running: _Optional[int] = ..., held: _Optional[int] = ..., steps: _Optional[int] = ..., step_log: _Optional[_Iterable[_Union[StepStat, _Mapping]]] = ..., blocks_cached: _Optional[int] = ..., computed_tokens: _Optional[int] = ..., prefix_cache_queried: _Optional[int] = ..., prefix_cache_hit: _Optional[int] = ...) -> None: ...

class EndChoiceRequest(_message.Message):
    __slots__ = ("request_id", "index")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    index: int
    def __init__(self, request_id: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class EndChoiceResponse(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: bool
    def __init__(self, ended: _Optional[bool] = ...) -> None: ...
