"""Scoring continuations the way evaluation harnesses do: POST /v1/completions with echo, logprobs: 1 and
max_tokens: 1 on context + continuation as one string, find the continuation by text_offset, sum token_logprobs
from there. The sums equal transformers' log-likelihood on the same checkpoint, for byte-level BPE and
SentencePiece tokenizers, with leading spaces and multi-byte characters; so do prompts sent as the ids that
/tokenize gives; /detokenize maps them back; bad bodies get 400 naming the field."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import httpx
import pytest
import torch

from services.launcher.stack import Stack
from tests.e2e.helpers import running_stack
from tests.spiece import make_spiece_model

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHOICES = {
    "Question: is the sky blue?\nAnswer:": [" yes", " no", " naïve"],
    "café au lait, naïve": [" é€", "🙂 x", "  lead"],
    "  two spaces then": [" the sky", "blue"],
}


@pytest.fixture(scope="module", params=["byte-level", "sentencepiece"])
def served(request, tiny_llama_dir: str, redis_url: str, tmp_path_factory) -> Iterator[tuple[Stack, str]]:
    folder = tiny_llama_dir if request.param == "byte-level" else str(make_spiece_model(tmp_path_factory.mktemp("sp")))
    with running_stack(folder, redis_url, mode="colocated", devices=("cpu:0",), prefill=1, decode=0) as stack:
        yield stack, folder


@pytest.fixture(scope="module")
def http(served) -> Iterator[httpx.Client]:
    stack, _ = served
    with httpx.Client(base_url=f"http://{stack.config.host}:{stack.config.http_port}", timeout=60) as client:
        yield client


def _reference(folder: str):
    """transformers' log-likelihood of the tokens of context + continuation that begin at or after the context."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def loglikelihood(context: str, continuation: str) -> float:
        enc = tokenizer(context + continuation, return_offsets_mapping=True)
        ids = enc["input_ids"]
        first = next(i for i, (start, _) in enumerate(enc["offset_mapping"]) if i > 0 and start >= len(context))
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        return sum(logprobs[p - 1, ids[p]].item() for p in range(first, len(ids)))

    return loglikelihood


def _score(http: httpx.Client, context: str, prompt: str | list[int]) -> tuple[float, dict]:
    body = {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
    choice = http.post("/v1/completions", json=body).raise_for_status().json()["choices"][0]
    lp = choice["logprobs"]
    start = bisect.bisect_left(lp["text_offset"], len(context))
    return sum(lp["token_logprobs"][start:-1]), choice  # the last token is the one generated


def test_scored_continuations_equal_transformers(served, http: httpx.Client) -> None:
    _, folder = served
    loglikelihood = _reference(folder)
    for context, continuations in CHOICES.items():
        for continuation in continuations:
            text = context + continuation
            got, choice = _score(http, context, text)
            assert got == pytest.approx(loglikelihood(context, continuation), abs=1e-4), (context, continuation)
            lp = choice["logprobs"]
            assert choice["text"].startswith(text) and lp["token_logprobs"][0] is None and lp["tokens"][0] == "<s>"
            assert lp["text_offset"][-1] == len(text) and lp["text_offset"] == sorted(lp["text_offset"])
            ids = http.post("/tokenize", json={"prompt": text}).raise_for_status().json()["tokens"]
            by_ids, by_ids_choice = _score(http, context, ids)  # echoed as the ids decode: the same text here
            assert by_ids == got and by_ids_choice["logprobs"] == lp and by_ids_choice["text"] == choice["text"]


def test_streamed_offsets_equal_the_unstreamed_ones(http: httpx.Client) -> None:
    body = {"prompt": "café au lait, naïve 🙂", "echo": True, "logprobs": 2, "max_tokens": 6, "temperature": 0,
            "ignore_eos": True}
    whole = http.post("/v1/completions", json=body).raise_for_status().json()["choices"][0]
    offsets, text = [], ""
    with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as events:
        for line in events.iter_lines():
            if line.startswith("data: {"):
                choice = httpx.Response(200, content=line[6:]).json()["choices"][0]
                offsets += choice["logprobs"]["text_offset"]
                text += choice["text"]
    assert (offsets, text) == (whole["logprobs"]["text_offset"], whole["text"])
    generated = whole["logprobs"]["text_offset"][-6:]
    assert generated[0] == len(body["prompt"]) and generated == sorted(generated) and generated[-1] <= len(text)


def test_tokenize_and_detokenize_answer_in_vllms_shapes(served, http: httpx.Client) -> None:
    _, folder = served
    want = transformers.AutoTokenizer.from_pretrained(folder)("naïve sky")["input_ids"]
    got = http.post("/tokenize", json={"model": "", "prompt": "naïve sky", "return_token_strs": True}).json()
    assert (got["tokens"], got["count"], got["max_model_len"], len(got["token_strs"])) == (want, len(want), 2048, len(want))
    chat = http.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["tokens"] == http.post("/tokenize", json={"prompt": "user: hi\nassistant:"}).json()["tokens"]
    assert http.post("/detokenize", json={"tokens": want[1:]}).json() == {"prompt": "naïve sky"}
    for path, body, field in (("/tokenize", {}, "prompt"), ("/tokenize", {"prompt": 5}, "prompt"),
                              ("/tokenize", {"prompt": "a", "model": "other"}, "model"),
                              ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt"),
                              ("/detokenize", {"tokens": [1, -1]}, "tokens"), ("/detokenize", {"tokens": "x"}, "tokens"),
                              ("/detokenize", {}, "tokens"), ("/detokenize", {"tokens": [1], "text": "?"}, "text")):
        answer = http.post(path, json=body)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == field, (path, body, answer.text)
