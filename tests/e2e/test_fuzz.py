"""Generated bodies, valid and not, against one stack: never a 5xx or INTERNAL/UNKNOWN, never a hang,
nothing left allocated."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distserve.v1 import router_pb2, router_pb2_grpc
from tests.e2e.fault_checks import all_alive, seconds_until_nothing_allocated
from tests.e2e.helpers import running_stack

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]
CALL_TIMEOUT_S = 30.0  # a request not answered by then counts as a hang
FUZZ = settings(max_examples=500, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

surrogates = st.sampled_from(["\ud800", "a\udfffb", "\udbff\udc00\ud800"])
text = st.one_of(st.text(max_size=40), surrogates)
huge = st.integers(min_value=-(2**80), max_value=2**80)
scalars = st.one_of(st.none(), st.booleans(), huge, st.floats(allow_nan=True, allow_infinity=True), text)
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=8)


def field(valid: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(valid, valid, junk)  # valid two times in three


SAMPLING = {
    "model": field(st.sampled_from(["", "tiny-llama", "other"])),
    "max_tokens": field(st.one_of(st.integers(1, 6), st.integers(3000, 2**70), st.integers(-(2**70), 0))),
    "temperature": field(st.one_of(st.just(0.0), st.floats(0, 1e38), st.just(1e-39))),
    "top_p": field(st.floats(0, 1)),
    "top_k": field(st.integers(-(2**40), 2**40)),
    "seed": field(huge),
    "n": field(st.integers(0, 3)),
    "stream": field(st.booleans()),
    "stop": field(st.one_of(st.none(), st.text(max_size=4))),
    "stop_token_ids": field(st.lists(huge, max_size=3)),
    "ignore_eos": field(st.booleans()),
    "logprobs": field(st.one_of(st.none(), st.integers(0, 5))),
}
prompts = st.one_of(text, st.lists(st.integers(-5, 300), max_size=12), st.lists(huge, max_size=3))
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "robot"]),
                                           "content": text}), max_size=3)


def bodies(prompt_key: str, prompt: st.SearchStrategy) -> st.SearchStrategy:
    optional = {**SAMPLING, "junk_field": junk}
    return st.one_of(
        st.fixed_dictionaries({prompt_key: field(prompt)}, optional=optional),
        junk,  # not even an object
    )


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    with running_stack(tiny_llama_dir, redis_url, mode="disagg") as stack:
        yield stack


@pytest.fixture(scope="module")
def http(stack):
    with httpx.Client(base_url=f"http://{stack.config.host}:{stack.config.http_port}", timeout=CALL_TIMEOUT_S) as client:
        yield client


def _post(http: httpx.Client, path: str, body: object) -> None:
    content = json.dumps(body)  # NaN and Infinity go as JavaScript writes them; surrogates as \u escapes
    with http.stream("POST", path, content=content, headers={"content-type": "application/json"}) as reply:
        raw = reply.read().decode()
    assert reply.status_code < 500, (body, reply.status_code, raw)
    if reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream"):
        assert raw.endswith("data: [DONE]\n\n"), raw
        assert '"error"' not in raw, raw


@given(body=bodies("prompt", prompts))
@FUZZ
def test_completions_fuzz(http, body) -> None:
    _post(http, "/v1/completions", body)


@given(body=bodies("messages", messages))
@FUZZ
def test_chat_completions_fuzz(http, body) -> None:
    _post(http, "/v1/chat/completions", body)


int32 = st.integers(-(2**31), 2**31 - 1)
grpc_requests = st.builds(
    router_pb2.GenerateRequest,
    prompt=st.text(max_size=40), prompt_token_ids=st.lists(st.one_of(int32, st.integers(-5, 300)), max_size=8),
    max_tokens=st.one_of(st.integers(1, 6), int32), temperature=st.floats(width=32),
    top_p=st.floats(width=32), top_k=int32, seed=st.integers(-(2**63), 2**63 - 1),
    ignore_eos=st.booleans(), stop_token_ids=st.lists(int32, max_size=3),
    request_id=st.one_of(st.text(max_size=20), st.just("r" * 100_000)), model=st.sampled_from(["", "x"]))


@given(request=grpc_requests)
@settings(FUZZ, max_examples=200)
def test_grpc_fuzz(stack, request) -> None:
    with grpc.insecure_channel(stack.router_address) as channel:
        try:
            for _ in router_pb2_grpc.RouterStub(channel).Generate(request, timeout=CALL_TIMEOUT_S):
                pass
        except grpc.RpcError as exc:
            assert exc.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
                                      grpc.StatusCode.DEADLINE_EXCEEDED), (request, exc.details())


def test_fuzzing_left_nothing_allocated(stack) -> None:
    """Runs after the fuzz tests of this module."""
    seconds, left = asyncio.run(seconds_until_nothing_allocated(stack, bound_s=5.0))
    assert left.nothing, left
    assert all_alive(stack)
