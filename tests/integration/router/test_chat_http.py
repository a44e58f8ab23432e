"""The router's HTTP and gRPC doors render chat messages with the checkpoint's template (or --chat-template FILE) as
transformers does, and refuses, with the template's own message, what the template refuses; it serves the model
under --served-model-name, with its max_model_len, and refuses a prompt past it naming the limit."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import httpx
import pytest

from distserve.v1 import router_pb2, router_pb2_grpc
from services.engine.make_model import make_model
from tests.chat_folders import GEMMA, publish
from tests.integration.test_front_doors import start_router, wait_answering

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PARTS = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = make_model("tiny-llama", tmp_path_factory.mktemp("chatml"), overrides={"vocab_size": 288})
    return publish(folder, "chatml")


def _wait_http(base: str, timeout_s: float = 30) -> None:
    """Until the HTTP port answers (the router opens it after its gRPC port, whose health the caller waited for)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(f"{base}/health", timeout=5)
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, "router HTTP port not answering"
            time.sleep(0.1)


def test_chat_messages_become_the_ids_transformers_makes_and_a_refusal_is_400(
        tmp_path: Path, published: Path, redis_url: str) -> None:
    gemma = tmp_path / "gemma.jinja"
    gemma.write_text(GEMMA)
    hf = transformers.AutoTokenizer.from_pretrained(published)
    for flags, template in ((("--served-model-name", "chat-model"), None), (("--chat-template", str(gemma)), GEMMA)):
        proc, grpc_port, http_port = start_router(str(published), redis_url, *flags)
        try:
            wait_answering(f"127.0.0.1:{grpc_port}", proc)
            base = f"http://127.0.0.1:{http_port}"
            _wait_http(base)
            if not template:
                (model,) = httpx.get(f"{base}/v1/models", timeout=10).json()["data"]
                assert (model["id"], model["max_model_len"]) == ("chat-model", 2048)
                long = httpx.post(f"{base}/v1/completions", json={"model": "chat-model", "prompt": "x" * 2100}, timeout=10)
                assert long.status_code == 400 and "max_model_len of 2048" in long.json()["error"]["message"]
            chat = [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "Sure"}]
            got = httpx.post(f"{base}/tokenize", json={"messages": chat, "add_generation_prompt": False,
                                                       "continue_final_message": True}, timeout=10).json()
            as_read = chat if template else [{**chat[0], "content": "one\ntwo"}, chat[1]]  # ChatML prints content
            assert got["tokens"] == hf.apply_chat_template(as_read, chat_template=template, continue_final_message=True,
                                                           tokenize=True, return_dict=False)
            # Gemma's template wants the user first; no template continues a message with the assistant's header after it
            body = {"messages": [{"role": "assistant", "content": "a"}], "continue_final_message": template is None}
            bad = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=10)
            assert bad.status_code == 400, bad.text
            error = bad.json()["error"]
            if template:
                assert error["param"] == "messages" and "roles must alternate" in error["message"]
            else:
                assert error["param"] == "continue_final_message" and "add_generation_prompt" in error["message"]
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:  # the same over gRPC
                stub = router_pb2_grpc.RouterStub(channel)
                messages = [router_pb2.ChatMessage(role="assistant", content="a")]
                for request, why in ((router_pb2.GenerateRequest(messages=messages, prompt="x"), "messages: give"),
                                     (router_pb2.GenerateRequest(messages=messages, chat_template_kwargs="[1]"),
                                      "chat_template_kwargs: must be a JSON object"),
                                     (router_pb2.GenerateRequest(messages=messages, continue_final_message=template is None),
                                      "roles must alternate" if template else "cannot go with add_generation_prompt")):
                    with pytest.raises(grpc.RpcError) as refused:
                        list(stub.Generate(request, timeout=10))
                    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT and why in refused.value.details()
        finally:
            proc.terminate()
            proc.wait(10)
