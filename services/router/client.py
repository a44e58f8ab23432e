"""A small client of distserve.v1.Router (`distserve generate` without --local)."""

from __future__ import annotations

import sys
from pathlib import Path

import grpc

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.sampling import SamplingParams
from services.common.tls import client_port_channel


def request_of(prompt: str, params: SamplingParams) -> router_pb2.GenerateRequest:
    req = router_pb2.GenerateRequest(prompt=prompt, max_tokens=params.max_tokens, temperature=params.temperature,
                                     top_p=params.top_p, top_k=params.top_k, ignore_eos=params.ignore_eos,
                                     stop_token_ids=list(params.stop_token_ids))
    if params.seed is not None:
        req.seed = params.seed
    return req


def generate_remote(address: str, prompt: str, params: SamplingParams, stream: bool = True, timeout_s: float = 600,
                    api_key: str = "", tls_ca: str = "") -> dict:
    """Streams the text to stdout when `stream`; returns {token_ids, text, finish_reason, request_id}. Over TLS
    when `tls_ca` (the CA file the router's certificate is checked against) is given."""
    token_ids: list[int] = []
    parts: list[str] = []
    finish_reason, request_id = "", ""
    with client_port_channel(address, Path(tls_ca).read_bytes() if tls_ca else None) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        try:
            metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
            for response in stub.Generate(request_of(prompt, params), timeout=timeout_s, metadata=metadata):
                token_ids.extend(response.token_ids)
                parts.append(response.text)
                finish_reason, request_id = response.finish_reason or finish_reason, response.request_id
                if stream:
                    sys.stdout.write(response.text)
                    sys.stdout.flush()
        except grpc.RpcError as exc:
            raise SystemExit(f"error: {exc.code().name}: {exc.details()}") from None
    if stream:
        sys.stdout.write("\n")
    return {"token_ids": token_ids, "text": "".join(parts), "finish_reason": finish_reason, "request_id": request_id}
