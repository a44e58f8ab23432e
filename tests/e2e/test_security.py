"""A stack with its deployment secret: instances refuse calls without the token, and still serve the router."""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc
import httpx
import openai
import pytest

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.auth import PRINCIPAL_KEY, ROUTER, TOKEN_KEY, token
from services.common.sampling import SamplingParams
from services.router.client import generate_remote
from tests.e2e.helpers import generate, instance_stats, running_stack
from tests.e2e.test_serving import _reference
from tests.tls_certs import Authority

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_instances_refuse_calls_without_the_token(tiny_llama_dir: str, redis_url: str) -> None:
    with running_stack(tiny_llama_dir, redis_url) as stack:
        addresses = {p.role: p.address for p in stack.procs if p.role}
        forged = ((PRINCIPAL_KEY, ROUTER), (TOKEN_KEY, token(b"not this deployment's secret, 32+ bytes", ROUTER)))
        sampling = worker_pb2.SamplingParams(max_tokens=4)
        for metadata in ((), forged):
            async with grpc.aio.insecure_channel(addresses["prefill"]) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await worker_pb2_grpc.PrefillStub(channel).Prefill(worker_pb2.PrefillRequest(
                        request_id="x", prompt_token_ids=list(range(1, 900)), sampling=sampling), metadata=metadata)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
            async with grpc.aio.insecure_channel(addresses["decode"]) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    async for _ in worker_pb2_grpc.DecodeStub(channel).Decode(worker_pb2.DecodeRequest(
                            request_id="y", prompt_token_ids=[1, 2], first_token=3, sampling=sampling),
                            metadata=metadata):
                        pass
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        stats = instance_stats(stack)  # with the token: served, and nothing was admitted above
        assert [s.blocks_used for s in stats] == [0, 0]

        responses = await generate(stack.router_address, "the prefill phase", max_tokens=6, temperature=0.0)
        assert sum(len(r.token_ids) for r in responses) == 6


async def test_the_stack_serves_the_reference_tokens_over_mutual_tls(tiny_llama_dir: str, redis_url: str, tmp_path,
                                                                     monkeypatch) -> None:
    for var, path in Authority("deployment").issue(tmp_path, "stack").items():
        monkeypatch.setenv(var, path)  # every process of the stack, and this test's checks, use it
    workload = [("the prefill phase is compute bound", 8), ("decoding is bound by memory", 5)]
    with running_stack(tiny_llama_dir, redis_url) as stack:
        prefill = next(p.address for p in stack.procs if p.role == "prefill")
        async with grpc.aio.insecure_channel(prefill) as channel:  # plaintext to an mTLS port: no handshake
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await worker_pb2_grpc.PrefillStub(channel).Stats(worker_pb2.InstanceStatsRequest(), timeout=5)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        got = [[t for r in await generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                for t in r.token_ids] for prompt, m in workload]
    assert got == _reference(tiny_llama_dir, workload)


@pytest.mark.long  # a whole `distserve up`; the router's client TLS is tested in tests/integration/test_router_tls.py
def test_up_with_a_certificate_serves_clients_over_tls(tiny_llama_dir: str, redis_url: str, tmp_path) -> None:
    """`distserve up --tls-cert/--tls-key`: the reference tokens over TLS on gRPC, the same text through the
    official `openai` client over https; a plaintext gRPC client is refused."""
    issued = Authority("router-ca").issue(tmp_path, "router")
    ca = issued["DISTSERVE_TLS_CA"]
    prompt, max_tokens = "the prefill phase is compute bound", 8
    with running_stack(tiny_llama_dir, redis_url, tls_cert=issued["DISTSERVE_TLS_CERT"],
                       tls_key=issued["DISTSERVE_TLS_KEY"], tls_ca=ca) as stack:
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        served = generate_remote(stack.router_address, prompt, params, stream=False, tls_ca=ca)
        with pytest.raises(SystemExit, match="UNAVAILABLE"):
            generate_remote(stack.router_address, prompt, params, stream=False, timeout_s=10)
        with openai.OpenAI(base_url=f"https://{stack.config.host}:{stack.config.http_port}/v1", api_key="none",
                           max_retries=0, http_client=httpx.Client(verify=ssl.create_default_context(cafile=ca),
                                                                   timeout=120)) as client:
            completion = client.completions.create(model=Path(tiny_llama_dir).name, prompt=prompt,
                                                   max_tokens=max_tokens, temperature=0.0)
    assert served["token_ids"] == _reference(tiny_llama_dir, [(prompt, max_tokens)])[0]
    assert completion.choices[0].text == served["text"]
