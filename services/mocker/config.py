"""Mock fleet configuration (env prefix DISTSERVE_MOCK_). The step lines default to the DistServe authors' fit of
OPT-13B on one A100-80GB (services/planner/data/a100-80gb.json, TP 1), its K/V 819,200 bytes per token."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common import defaults
from services.common.step_model import DecodeCoeffs, PrefillCoeffs


class MockSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTSERVE_MOCK_", frozen=True)

    model: str = Field(description="model folder: the vocabulary and context limits requests are checked against")
    redis_url: str = Field(description="Redis holding the registry, load book and prefix-cache index")
    prefill: int = Field(1, ge=0, description="mock prefill instances in this process")
    decode: int = Field(1, ge=0, description="mock decode instances in this process")
    host: str = Field("127.0.0.1", description="address the mocks' gRPC servers bind")
    port: int = Field(0, ge=0, description="the fleet's own gRPC port: health (SERVING once every mock is registered) "
                                           "and the Release of leases, as a kvxfer serves it; 0: any free port")
    metrics_port: int = Field(0, ge=0, description="Prometheus HTTP port; 0 = off")
    node: str = Field("mock", description="host name the mocks register (they share one lease table)")
    id_prefix: str = Field("mock", description="instance ids are {prefix}-{role}-{i}")
    block_size: int = Field(defaults.BLOCK_SIZE, ge=1, description="tokens per KV block")
    num_blocks: int = Field(defaults.NUM_BLOCKS, ge=1, description="KV blocks in each mock's pool")
    batch_tokens: int = Field(defaults.MAX_BATCH_TOKENS, ge=1, description="Lm: a prefill batch's token bound")
    max_num_seqs: int = Field(defaults.MAX_NUM_SEQS, ge=1, description="most requests in a decode batch")
    max_pending: int = Field(256, ge=1, description="requests queued or running per mock before RESOURCE_EXHAUSTED")
    lease_ttl_s: float = Field(defaults.LEASE_TTL_S, gt=0, description="how long prefilled K/V waits for a pull")
    heartbeat_s: float = Field(1.0, gt=0, description="registry heartbeat and prefix-index publishing period")
    prefill_c0: float = Field(0.0181, ge=0, description="s: a prefill step's fixed cost")
    prefill_per_token: float = Field(1.019e-4, ge=0, description="s per prompt token computed in a prefill step")
    prefill_per_sq: float = Field(7.12e-9, ge=0, description="s per squared prompt token (attention)")
    decode_c0: float = Field(0.0199, ge=0, description="s: a decode step's fixed cost")
    decode_per_ctx: float = Field(6.27e-7, ge=0, description="s per context token in a decode step")
    decode_per_req: float = Field(3.85e-5, ge=0, description="s per request in a decode step")
    kv_bytes_per_token: int = Field(819_200, ge=0, description="bytes of K/V per token, every layer")
    link_gbps: float = Field(25.0, gt=0, description="GB/s of a K/V pull between two mocks")
    time_scale: float = Field(1.0, gt=0, description="every step and pull lasts this multiple of the model's time")

    def prefill_line(self) -> PrefillCoeffs:
        return PrefillCoeffs(self.prefill_c0, self.prefill_per_token, self.prefill_per_sq)

    def decode_line(self) -> DecodeCoeffs:
        return DecodeCoeffs(self.decode_c0, self.decode_per_ctx, self.decode_per_req)
