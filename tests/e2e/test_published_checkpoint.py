"""A checkpoint as published, served in every mode: a bf16 model sharded with an index (written by transformers),
its ChatML template, and a generation_config.json whose second eos id ends the answer and whose temperature 0
makes requests that omit one greedy. Chat over HTTP and gRPC, and ids over gRPC, give transformers' bf16 greedy
tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from distserve.v1 import router_pb2
from services.launcher.stack import Stack
from tests.chat_folders import publish
from tests.e2e.helpers import generate, running_stack
from tests.hf_checkpoints import save_hf_checkpoint

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
DB = 11
CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "the sky"}, {"type": "text", "text": "is it blue?"}]}]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], list[int]]:
    """The folder, the chat's prompt ids (transformers'), and transformers' greedy answer up to the second eos id,
    chosen as the greedy output's first new token from the fourth on."""
    folder = publish(save_hf_checkpoint(tmp_path_factory.mktemp("published"), dtype=torch.bfloat16,
                                        max_shard_size="100KB", vocab_size=288), "chatml")
    joined = [CHAT[0], {**CHAT[1], "content": "the sky\nis it blue?"}]  # ChatML prints content: parts joined
    ids = transformers.AutoTokenizer.from_pretrained(folder).apply_chat_template(
        joined, add_generation_prompt=True, tokenize=True, return_dict=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        free = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False,
                              eos_token_id=2)[0, len(ids):].tolist()
    end = next(i for i, t in enumerate(free) if i >= 3 and t not in free[:i] and t != 2)
    assert 2 not in free[:end]
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, free[end]],
                                                               "temperature": 0.0}))
    return folder, ids, free[: end + 1]


# Colocated and chunked with `-m long`: a stack starts in ~12 s on 2 cores.
@pytest.fixture(scope="module", params=["disagg", pytest.param("colocated", marks=pytest.mark.long),
                                        pytest.param("chunked", marks=pytest.mark.long)])
def stack(request, published, redis_url: str) -> Iterator[Stack]:
    with running_stack(str(published[0]), f"{redis_url.rsplit('/', 1)[0]}/{DB}", mode=request.param) as stack:
        yield stack


def test_chat_over_http_gives_transformers_tokens_to_the_second_eos(stack: Stack, published) -> None:
    _, ids, want = published
    reply = httpx.post(f"http://{stack.config.host}:{stack.config.http_port}/v1/chat/completions", timeout=120,
                       json={"messages": CHAT, "max_tokens": MAX_TOKENS})  # no temperature: the file's 0
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["token_ids"] == want and body["choices"][0]["finish_reason"] == "stop"


async def test_chat_and_ids_over_grpc_take_the_files_defaults_too(stack: Stack, published) -> None:
    _, ids, want = published
    messages = [router_pb2.ChatMessage(role="system", content="Be brief."),
                router_pb2.ChatMessage(role="user", content_parts=["the sky", "is it blue?"])]
    for prompt in ({"prompt_ids": ids}, {"messages": messages}):
        responses = await generate(stack.router_address, max_tokens=MAX_TOKENS, **prompt)
        assert [t for r in responses for t in r.token_ids] == want
        assert responses[-1].finish_reason == "stop" and responses[-1].prompt_tokens == len(ids)
