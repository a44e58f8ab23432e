"""Router configuration (env prefix DISTSERVE_ROUTER_)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common import defaults

Mode = Literal["disagg", "colocated", "chunked"]


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTSERVE_ROUTER_", frozen=True)

    model: str = Field(description="model folder (tokenizer and limits)")
    served_model_name: str = Field("", description="name clients use for the model; the folder name when empty")
    chat_template: str = Field("", description="a jinja chat template file, used instead of the model folder's own")
    generation_config: Literal["auto", "none"] = Field(
        "auto", description="auto: the model folder's generation_config.json sets temperature, top_p, top_k and "
                            "repetition_penalty for requests that omit them; none: the API's defaults")
    mode: Mode = Field("disagg", description="disagg: prefill then decode instances; colocated/chunked: one instance per request")
    host: str = Field("127.0.0.1", description="address to bind")
    grpc_port: int = Field(50051, description="gRPC port (distserve.v1.Router)")
    http_port: int = Field(8000, description="OpenAI-compatible HTTP port; 0 = off")
    redis_url: str = Field(description="Redis holding the registry, load book and request records")
    max_inflight: int = Field(256, description="requests served at once; more wait FCFS")
    max_queued: int = Field(1024, description="requests waiting for admission before RESOURCE_EXHAUSTED / 429")
    default_max_tokens: int = Field(16, description="max_tokens when the request gives none")
    max_prompt_chars: int = Field(1 << 20, description="longest prompt text accepted")
    retries: int = Field(2, description="times a request is retried on another instance after an instance failure")
    refresh_s: float = Field(0.5, description="how often the instance list is re-read from Redis")
    wait_instance_s: float = Field(10.0, ge=0, description="how long a request waits for an instance of a role "
                                   "when none is usable (a lone instance restarting) before UNAVAILABLE / 503")
    crash_wait_s: float = Field(2.0, ge=0, description="after an instance's process died, how long to wait for its "
                                "supervisor to say which requests were in the fatal step (those are not retried)")
    api_key: str = Field("", description="when set, clients must send it (gRPC metadata / HTTP bearer)")
    api_key_file: str = Field("", description="file of hashed API keys (`distserve api-key add`); clients send one")
    allow_unauthenticated: bool = Field(False, description="serve beyond loopback without API keys")
    close_reflection: bool = Field(False, description="gRPC reflection needs an API key too")
    tls_cert: str = Field("", description="PEM certificate (chain) for TLS on the client ports (gRPC and HTTP); "
                                          "none: plaintext")
    tls_key: str = Field("", description="PEM private key of --tls-cert")
    max_body_bytes: int = Field(4 << 20, description="largest HTTP request body accepted (413 above)")
    metrics_port: int = Field(0, description="Prometheus HTTP port; 0 = off")
    drain_grace_s: float = Field(defaults.DRAIN_GRACE_S, description="on SIGTERM: seconds in-flight requests get to finish")
    admission: Literal["off", "refuse", "best-effort"] = Field(
        "off", description="SLO-aware admission (disagg): refuse, or admit as best-effort, a request predicted to miss "
                           "its SLO; off: predict only, for the error metrics")
    slo_ttft_ms: float = Field(0.0, ge=0, description="TTFT objective of a request without x-slo-ttft-ms; 0: none")
    slo_tpot_ms: float = Field(0.0, ge=0, description="TPOT objective of a request without x-slo-tpot-ms; 0: none")
    slo_ttft_error_quantile: float = Field(
        0.9, ge=0, lt=1, description="admission adds this quantile of the model's TTFT errors on the last 200 "
                                     "finished requests (of the last 60 s; from 20 on) to each prediction; 0: none")
    slo_tpot_error_quantile: float = Field(
        0.0, ge=0, lt=1, description="the same for TPOT (0 by default: where TPOT decides it refused nearly "
                                     "every request, docs/admission.md)")
    model_refresh_s: float = Field(1.0, gt=0, description="how often the planner's fitted model (ds:model) is re-read")
    routing: Literal["model", "queue"] = Field(
        "model", description="how the prefill instance (colocated, chunked: the instance) is picked: model: the least "
                             "predicted TTFT, its queue plus the prefill of the prompt's suffix it has not cached (in "
                             "tokens without a fitted line, as colocated and chunked); queue: the least booked load")
    local_prefill_tokens: int = Field(
        64, ge=0, description="routing=model: the longest uncached suffix a decode instance holding the rest of the "
                              "prompt prefills itself, when the model predicts it sooner (0: never)")
    reverse_pull_tokens: int = Field(
        32, ge=0, description="routing=model: how many more prompt tokens the decode instance must hold than the "
                              "prefill for the prefill to pull them from it first, when the model predicts it "
                              "sooner (0: never)")
    reverse_lease_ms: float = Field(1.0, ge=0, description="routing=model: what a reverse pull's lease call to the "
                                                           "decode instance adds to its TTFT")
    pull_gbps: float = Field(2.0, ge=0, description="routing=model: GB/s of a K/V pull between instances, to price "
                                                    "a reverse pull's transfer (0: taken as free)")
    report_cached_tokens: bool = Field(
        True, description="tell clients how many prompt tokens came from the prefix cache (usage.prompt_tokens_details."
                          "cached_tokens, GenerateResponse.cached_tokens); off where many users share one API key "
                          "without a per-user cache_salt, as a hit tells one user that another sent the same prefix "
                          "(request records and metrics keep the figure)")
    tool_call_parser: Literal["hermes", "llama3_json", "mistral"] = Field(
        "hermes", description="the model family's tool-call format: how calls are read from chat outputs, and "
                              "written by the grammar of tool_choice required or named")
    reasoning_parser: Literal["none", "think"] = Field(
        "none", description="think: a chat output's text before </think> is its reasoning_content, and a structured "
                            "output's grammar applies after it")
    prefill_batch_tokens: int = Field(defaults.MAX_BATCH_TOKENS, ge=1,
                                      description="the prefill instances' batch bound in tokens, for the prediction")

    @model_validator(mode="after")
    def _tls_pair(self) -> RouterSettings:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together: TLS needs both, plaintext neither")
        return self
