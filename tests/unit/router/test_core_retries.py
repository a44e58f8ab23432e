"""RouterCore's failure paths against fakes of its ports (tests/unit/router/fake_ports.py; no processes): a prefill
retried on another instance, a decode retried from the same K/V, a re-prefill after tokens streamed, and a client
that goes away. In every case the client gets each token once, and nothing stays booked or leased."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import grpc
import pytest

from services.common.errors import NoInstance
from services.common.sampling import SamplingParams
from services.common.tokenizer import ByteTokenizer
from services.router.core import Chunk, RouterCore
from services.router.paths import Route
from services.router.prefix_routing import PrefillPick
from services.router.request import RouterRequest
from tests.unit.router.fake_ports import Dispatcher, Instance, Leases, Registry, token_at

PROMPT = [1, 70, 71, 72, 73]
MAX_TOKENS = 6
EXPECTED = [token_at(len(PROMPT) + i) for i in range(MAX_TOKENS)]  # what a run without failures streams

UNAVAILABLE, KV_GONE, BAD_INPUT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION,
                                   grpc.StatusCode.INVALID_ARGUMENT)


def core(dispatcher: Dispatcher, leases: Leases | None = None, retries: int = 2) -> RouterCore:
    return RouterCore("disagg", ByteTokenizer(), dispatcher, Registry(), max_inflight=4, max_queued=4,  # type: ignore[arg-type]
                      retries=retries, release_lease=leases)


def request(request_id: str = "r") -> RouterRequest:
    return RouterRequest(request_id, list(PROMPT), SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))


async def cleaned_up(router: RouterCore) -> None:
    """Waits for the cleanups a closed request started (lease releases, unbookings: tasks of their own that a
    cancelled request does not interrupt)."""
    await router.cleanups.drain()


async def tokens(router: RouterCore, req: RouterRequest) -> list[int]:
    chunks: list[Chunk] = [chunk async for chunk in router.generate(req)]
    return [t for chunk in chunks for t in chunk.token_ids]


async def test_a_failed_prefill_is_retried_on_another_instance() -> None:
    dead, live = Instance("p0", "prefill", fail_prefill=UNAVAILABLE), Instance("p1", "prefill")
    dispatcher = Dispatcher(dead, live, Instance("d0", "decode"))
    router = core(dispatcher)
    req = request()
    assert await tokens(router, req) == EXPECTED
    assert len(dead.prefills) == len(live.prefills) == 1 and dead.info.key in dispatcher.failed
    assert req.prefill_instance == "p1" and not dispatcher.booked


async def test_a_decode_that_fails_before_its_first_token_is_retried_from_the_same_kv() -> None:
    prefill, dead, live = Instance("p0", "prefill"), Instance("d0", "decode", fail_after=0), Instance("d1", "decode")
    dispatcher = Dispatcher(prefill, dead, live)
    leases = Leases()
    req = request()
    assert await tokens(core(dispatcher, leases), req) == EXPECTED
    assert len(prefill.prefills) == 1, "no re-prefill: the K/V is still leased at the source"
    assert dead.decodes[0].kv == live.decodes[0].kv and req.decode_instance == "d1"
    assert not dispatcher.booked and not leases.released  # d1 pulled the lease


async def test_a_decode_that_dies_mid_stream_is_re_prefilled_with_the_tokens_streamed() -> None:
    prefill, dead, live = Instance("p0", "prefill"), Instance("d0", "decode", fail_after=2), Instance("d1", "decode")
    dispatcher = Dispatcher(prefill, dead, live)
    req = request()
    assert await tokens(core(dispatcher), req) == EXPECTED  # no token twice, none lost
    first, again = prefill.prefills
    assert list(again.prompt_token_ids) == PROMPT + EXPECTED[:3]  # the first token and the two decoded ones
    assert again.sampling.max_tokens == MAX_TOKENS - 3 and again.request_id == "r~1"
    assert list(live.decodes[0].prompt_token_ids) == PROMPT + EXPECTED[:3] and req.attempt == 1
    assert not dispatcher.booked


async def test_kv_gone_at_decode_re_prefills() -> None:
    prefill, lost = Instance("p0", "prefill"), Instance("d0", "decode", fail_after=0, fail_code=KV_GONE)
    dispatcher = Dispatcher(prefill, lost, Instance("d1", "decode"))
    assert await tokens(core(dispatcher), request()) == EXPECTED
    assert len(prefill.prefills) == 2 and not dispatcher.failed, "the decode instance lives: only the K/V went"


async def test_retries_spent_fail_the_request_with_its_error_and_free_everything() -> None:
    prefill = Instance("p0", "prefill")
    dispatcher = Dispatcher(prefill, Instance("d0", "decode", fail_after=0, fail_code=KV_GONE, failures=9))
    leases = Leases()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await tokens(core(dispatcher, leases, retries=1), request())
    assert failed.value.code() == KV_GONE and len(prefill.prefills) == 2
    assert not dispatcher.booked and leases.released == {"p0/r": 1, "p0/r~1": 1}, "each unpulled lease ended now"


async def test_bad_input_downstream_is_not_retried() -> None:
    prefill, refusing = Instance("p0", "prefill"), Instance("d0", "decode", fail_after=0, fail_code=BAD_INPUT)
    dispatcher = Dispatcher(prefill, refusing, Instance("d1", "decode"))
    with pytest.raises(grpc.aio.AioRpcError):
        await tokens(core(dispatcher), request())
    assert len(refusing.decodes) == 1 and len(prefill.prefills) == 1 and not dispatcher.booked


async def test_a_client_gone_at_the_first_token_ends_the_lease() -> None:
    prefill, decode = Instance("p0", "prefill"), Instance("d0", "decode")
    dispatcher, leases = Dispatcher(prefill, decode), Leases()
    router = core(dispatcher, leases)
    async with aclosing(router.generate(request())) as stream:
        first = await anext(stream)
    assert first.token_ids == EXPECTED[:1]
    await cleaned_up(router)
    assert leases.released == {"p0/r": 1} and not decode.decodes and not dispatcher.booked


async def test_a_client_gone_mid_decode_cancels_the_decode_call() -> None:
    prefill, decode = Instance("p0", "prefill"), Instance("d0", "decode")
    dispatcher, leases = Dispatcher(prefill, decode), Leases()
    router = core(dispatcher, leases)
    got: list[int] = []
    async with aclosing(router.generate(request())) as stream:
        async for chunk in stream:
            got += chunk.token_ids
            if len(got) == 3:
                decode.step.clear()  # the instance is mid-step when the client goes
                break
    await cleaned_up(router)
    assert got == EXPECTED[:3] and decode.cancelled == 1
    assert not dispatcher.booked and not leases.released  # the decode pulled the K/V: its lease ended there


async def test_a_cancelled_request_task_frees_what_it_booked() -> None:
    prefill, decode = Instance("p0", "prefill"), Instance("d0", "decode")
    decode.step.clear()  # decode never gets to a token
    dispatcher, leases = Dispatcher(prefill, decode), Leases()
    router = core(dispatcher, leases)
    task = asyncio.create_task(tokens(router, request()))
    while not decode.decodes:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await cleaned_up(router)
    assert decode.cancelled == 1 and not dispatcher.booked and leases.released == {"p0/r": 1}


async def choice_tokens(router: RouterCore, n: int) -> list[list[int]]:
    req = RouterRequest("r", list(PROMPT), SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True), n=n)
    got: list[list[int]] = [[] for _ in range(n)]
    async for chunk in router.generate(req):
        got[chunk.index] += chunk.token_ids
    return got


async def test_the_shared_prefill_of_n_choices_is_retried_on_another_instance_once_for_all() -> None:
    dead, live = Instance("p0", "prefill", fail_prefill=UNAVAILABLE), Instance("p1", "prefill")
    dispatcher, leases = Dispatcher(dead, live, Instance("d0", "decode")), Leases()
    router = core(dispatcher, leases)
    assert await choice_tokens(router, 2) == [EXPECTED, EXPECTED]
    assert len(dead.prefills) == len(live.prefills) == 1 and live.prefills[0].pulls == 2
    await cleaned_up(router)
    assert not dispatcher.booked and leases.released == {"p1/r": 1}  # the choices done, the shared lease ends


async def test_a_choice_whose_shared_decode_fails_re_prefills_alone() -> None:
    prefill, dead = Instance("p0", "prefill"), Instance("d0", "decode", fail_after=0)
    dispatcher, leases = Dispatcher(prefill, dead, Instance("d1", "decode")), Leases()
    router = core(dispatcher, leases)
    assert await choice_tokens(router, 2) == [EXPECTED, EXPECTED]
    shared, again = prefill.prefills
    assert shared.request_id == "r" and again.request_id in ("r-0~1", "r-1~1") and dead.info.key in dispatcher.failed
    await cleaned_up(router)
    assert not dispatcher.booked and leases.released == {"p0/r": 1}


def reverse(request_id: str = "r") -> RouterRequest:
    """A follow-up routed to pull the prefix the decode instance d0 holds into the prefill first."""
    return RouterRequest(request_id, list(PROMPT), SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True),
                         route=Route("reverse", "d0", 4))


@pytest.mark.parametrize("refusal", [grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE])
async def test_a_prefix_lease_no_prefill_took_is_ended_at_once(refusal: grpc.StatusCode) -> None:
    # the prefill's queue is full (not retried), or every prefill instance is gone (retries spent)
    prefills = [Instance(f"p{i}", "prefill", fail_prefill=refusal) for i in range(2)]
    dispatcher, leases = Dispatcher(*prefills, Instance("d0", "decode")), Leases()
    router = core(dispatcher, leases, retries=1)
    with pytest.raises((grpc.aio.AioRpcError, NoInstance)):
        await tokens(router, reverse())
    await cleaned_up(router)
    assert leases.released == {"d0/prefix": 1} and not dispatcher.booked


async def test_a_client_gone_while_the_prefill_pulls_the_prefix_ends_its_lease() -> None:
    prefill, decode = Instance("p0", "prefill"), Instance("d0", "decode")
    prefill.admit.clear()  # queued, or pulling the leased prefix
    dispatcher, leases = Dispatcher(prefill, decode), Leases()
    router = core(dispatcher, leases)
    task = asyncio.create_task(tokens(router, reverse()))
    while not prefill.prefills:
        await asyncio.sleep(0)
    assert prefill.prefills[0].prefix.lease_id == "d0/prefix"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    prefill.admit.set()  # the call the router let go of ends: its lease is ended as it comes
    await cleaned_up(router)
    assert leases.released == {"d0/prefix": 1, "p0/r": 1} and not dispatcher.booked


async def test_a_prefix_the_prefill_took_is_not_released_again() -> None:
    dispatcher, leases = Dispatcher(Instance("p0", "prefill"), Instance("d0", "decode")), Leases()
    router = core(dispatcher, leases)
    assert await tokens(router, reverse()) == EXPECTED
    await cleaned_up(router)
    assert not leases.released  # the prefill's pull ended the prefix lease; the decode's pull the prefill's


class CountingRoutes:
    """A prefix router that picks no instance and counts its calls per request."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def route(self, prompt_ids: list[int], namespace: str, max_tokens: int, paths: bool = True,
                    prefills_role: str = "prefill"):
        self.calls.append(len(prompt_ids))
        return PrefillPick("", 0), Route("pull")


async def test_a_request_that_waited_for_a_slot_is_routed_again_when_it_gets_one() -> None:
    prefill, decode = Instance("p0", "prefill"), Instance("d0", "decode")
    decode.step.clear()  # the first request holds the only slot
    routes = CountingRoutes()
    router = RouterCore("disagg", ByteTokenizer(), Dispatcher(prefill, decode), Registry(), max_inflight=1,  # type: ignore[arg-type]
                        max_queued=4, retries=0, prefix_router=routes)  # type: ignore[arg-type]
    first = asyncio.create_task(tokens(router, request("a")))
    while not decode.decodes:
        await asyncio.sleep(0)
    second = asyncio.create_task(tokens(router, RouterRequest("b", [*PROMPT, 9], SamplingParams(max_tokens=2))))
    while len(routes.calls) < 2:
        await asyncio.sleep(0)
    decode.step.set()
    await asyncio.gather(first, second)
    assert routes.calls == [len(PROMPT), len(PROMPT) + 1, len(PROMPT) + 1]  # the second: at arrival, after its wait
