"""TLS on the router's client ports (--tls-cert/--tls-key): the official `openai` client over https and
`distserve generate --tls-ca` get through with the CA; plaintext clients and clients trusting another CA
do not. The certificates are made in the test."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.api_keys import add_key
from services.common.net import free_port
from services.common.tls import client_port_channel
from tests.integration.test_front_doors import start_router, wait_answering
from tests.tls_certs import Authority

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _generate(channel: grpc.Channel, key: str) -> grpc.StatusCode:
    try:
        list(router_pb2_grpc.RouterStub(channel).Generate(router_pb2.GenerateRequest(prompt="hi", max_tokens=2),
                                                          timeout=5, metadata=(("authorization", f"Bearer {key}"),)))
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_router_client_ports_speak_tls_to_clients_that_trust_its_ca(
        tmp_path: Path, tiny_llama_dir: str, redis_url: str) -> None:
    issued = Authority("router-ca").issue(tmp_path / "tls", "router")
    ca, cert, key_file = issued["DISTSERVE_TLS_CA"], issued["DISTSERVE_TLS_CERT"], issued["DISTSERVE_TLS_KEY"]
    other_ca = Authority("other-ca").issue(tmp_path / "other", "x")["DISTSERVE_TLS_CA"]
    key = add_key(tmp_path / "keys", "app")
    proc, grpc_port, http_port = start_router(tiny_llama_dir, redis_url, "--api-key-file", str(tmp_path / "keys"),
                                              "--tls-cert", cert, "--tls-key", key_file)
    address = f"127.0.0.1:{grpc_port}"
    try:
        wait_answering(address, proc, ca=Path(ca).read_bytes())
        with client_port_channel(address, Path(ca).read_bytes()) as channel:
            assert _generate(channel, key) is grpc.StatusCode.UNAVAILABLE  # through TLS and the key: no instances
        for refused in (client_port_channel(address), client_port_channel(address, Path(other_ca).read_bytes())):
            with refused as channel:
                assert _generate(channel, key) is grpc.StatusCode.UNAVAILABLE
                with pytest.raises(grpc.RpcError) as no_health:  # not even the open health service answers
                    health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
                assert no_health.value.code() is grpc.StatusCode.UNAVAILABLE
        # `distserve generate`: with the CA it reaches the router's key check (a guessed key: UNAUTHENTICATED)
        for flags, answer in ((["--tls-ca", ca], "UNAUTHENTICATED"), ([], "UNAVAILABLE")):
            done = subprocess.run([sys.executable, "-m", "services", "generate", "hi", "--router", address,
                                   "--api-key", "ds-guessed", "--max-tokens", "2", *flags],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode != 0 and f"error: {answer}" in done.stderr, done.stderr

        with openai.OpenAI(base_url=f"https://127.0.0.1:{http_port}/v1", api_key=key, max_retries=0,
                           http_client=httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=10)) as client:
            assert [m.id for m in client.models.list()] == [Path(tiny_llama_dir).name]
        with openai.OpenAI(base_url=f"https://127.0.0.1:{http_port}/v1", api_key=key, max_retries=0,
                           http_client=httpx.Client(verify=ssl.create_default_context(cafile=other_ca), timeout=10)) as stranger:
            with pytest.raises(openai.APIConnectionError):
                stranger.models.list()
        with pytest.raises(httpx.HTTPError):  # plaintext HTTP to the TLS port gets no answer
            httpx.get(f"http://127.0.0.1:{http_port}/v1/models", headers={"authorization": f"Bearer {key}"},
                      timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_router_refuses_a_certificate_without_its_key(tmp_path: Path, tiny_llama_dir: str, redis_url: str) -> None:
    cert = Authority("ca").issue(tmp_path, "router")["DISTSERVE_TLS_CERT"]
    done = subprocess.run([sys.executable, "-m", "services", "router", "--model", tiny_llama_dir, "--redis-url",
                           redis_url, "--grpc-port", str(free_port()), "--http-port", "0", "--tls-cert", cert],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "tls_key" in done.stderr
