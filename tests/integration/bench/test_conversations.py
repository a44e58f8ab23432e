"""The load generator's conversation driver against a stand-in router on a real gRPC port: each follow-up turn
resends the conversation as the server answered it, after the previous answer and its think time."""

import time

import grpc
import pytest

from distserve.v1 import router_pb2, router_pb2_grpc
from services.bench.loadgen import Conversation, Turn, run_load

ANSWER = 3  # tokens per answer: the prompt's length, then 1000 + the turn's ordinal at this server


class Recorder(router_pb2_grpc.RouterServicer):
    """Answers every prompt with tokens derived from it, noting what arrived when; fails prompts holding a 0."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float, router_pb2.GenerateRequest]] = []  # (received, answered, request)

    async def Generate(self, request, context):
        received = time.monotonic()
        if 0 in request.prompt_token_ids:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a zero")
        tokens = [len(request.prompt_token_ids), 1000 + len(self.calls), 7]
        for token in tokens[:-1]:
            yield router_pb2.GenerateResponse(token_ids=[token])
        yield router_pb2.GenerateResponse(token_ids=tokens[-1:], finish_reason="length", cached_tokens=5)
        self.calls.append((received, time.monotonic(), request))


@pytest.fixture()
async def router():
    server = grpc.aio.server()
    recorder = Recorder()
    router_pb2_grpc.add_RouterServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", recorder
    await server.stop(None)


async def test_each_turn_resends_the_history_as_answered_plus_its_message_after_the_think_time(router):
    address, recorder = router
    chat = Conversation(0.0, (Turn("c-0", (11, 12, 13), ANSWER), Turn("c-1", (21,), ANSWER, think_s=0.3),
                              Turn("c-2", (31, 32), ANSWER, think_s=0.1)))
    results = await run_load(address, [chat], cache_salt="run-1")
    assert [r.request_id for r in results] == ["c-0", "c-1", "c-2"] and [r.turn for r in results] == [0, 1, 2]
    prompts = [tuple(call.prompt_token_ids) for _, _, call in recorder.calls]
    answers = [(len(p), 1000 + i, 7) for i, p in enumerate(prompts)]
    assert prompts[0] == (11, 12, 13)
    assert prompts[1] == prompts[0] + answers[0] + (21,)
    assert prompts[2] == prompts[1] + answers[1] + (31, 32)
    assert [r.prompt_tokens for r in results] == [len(p) for p in prompts]
    assert all(r.ok and r.output_tokens == ANSWER and r.cached_tokens == 5 for r in results)
    assert all(call.cache_salt == "run-1" and call.ignore_eos for _, _, call in recorder.calls)
    for (_, answered, _), (received, _, _), think in zip(recorder.calls, recorder.calls[1:], (0.3, 0.1)):
        assert think <= received - answered < think + 0.25


async def test_conversations_start_at_their_arrivals_and_a_failed_turn_ends_its_conversation(router):
    address, recorder = router
    failing = Conversation(0.0, (Turn("f-0", (0, 1), ANSWER), Turn("f-1", (2,), ANSWER)))
    later = Conversation(0.4, (Turn("l-0", (5,), ANSWER),))
    began = time.monotonic()
    results = await run_load(address, [failing, later])
    assert [r.request_id for r in results] == ["f-0", "f-1", "l-0"]
    assert results[0].error.startswith("INVALID_ARGUMENT") and results[1].error == "an earlier turn failed"
    assert results[1].prompt_tokens == 3 and results[2].ok  # the unsent turn: the prompt it would have sent
    ((received, _, call),) = recorder.calls  # the failed call records nothing; the later conversation's does
    assert call.request_id == "l-0" and received - began >= 0.4 and not call.HasField("cache_salt")
