"""The router's request path: FCFS admission, prefill then decode (or one colocated instance), retries on
instance failure, token streaming with incremental detokenization, lifecycle records and metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

import grpc

from distserve.v1 import kv_pb2, worker_pb2, worker_pb2_grpc
from services.common import metrics
from services.common.convert import logprobs_from_proto, sampling_to_proto
from services.common.errors import CrashedInstance, LocalPrefillDeclined, Overloaded
from services.common.registry import Registry
from services.common.sampling import SamplingParams, TokenLogprobs
from services.common.tokenizer import Tokenizer
from services.router.choices import SharedPrefill, SharedStream, merge
from services.router.cleanup import Cleanups
from services.router.dispatch import Assignment, Dispatcher
from services.router.gate import SloGate
from services.router.output_text import OutputText
from services.router.paths import CACHED_TOKENS, DECISIONS
from services.router.prefix_routing import PrefixRouter
from services.router.request import RouterRequest
from services.router.retry import Next, Retries

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class Chunk:
    token_ids: list[int]
    text: str
    finish_reason: str = ""
    index: int = 0  # the choice
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # one per token, when asked
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # a choice's first chunk: of prompt tokens 1..
    cached_tokens: int = 0  # a choice's first chunk: prompt tokens the prefill did not compute (its cache had them)
    decode_cached_tokens: int = 0  # ... and those the decode instance's cache held, not pulled (delta, reverse)
    starts: list[int] = field(default_factory=list)  # each token's first character in the choice's whole text


class RouterCore:
    def __init__(self, mode: str, tokenizer: Tokenizer, dispatcher: Dispatcher, registry: Registry,
                 max_inflight: int, max_queued: int, retries: int,
                 release_lease: Callable[[kv_pb2.KVHandle], Awaitable[None]] | None = None,
                 gate: SloGate | None = None, prefix_router: PrefixRouter | None = None,
                 local_prefill_cap: int = 0) -> None:
        self.mode = mode
        self.tokenizer = tokenizer
        self.dispatcher = dispatcher
        self.registry = registry
        self.max_queued = max_queued
        self.retries = retries
        self.release_lease = release_lease
        self.gate = gate  # SLO-aware admission (router/gate.py); None: FCFS only
        self.prefix_router = prefix_router  # the pick by the model and the prefix cache (router/prefix_routing.py)
        self.local_prefill_cap = local_prefill_cap  # the most prompt tokens a decode instance prefills itself
        self._admission = asyncio.Semaphore(max_inflight)
        self.cleanups = Cleanups()
        self._queued = 0
        self._queued_tokens = 0  # prompt tokens of the requests waiting for a slot: booked nowhere yet

    async def generate(self, req: RouterRequest) -> AsyncIterator[Chunk]:
        """Streams the request's tokens; cancelling the iteration cancels every downstream call."""
        req.lifetime.arrival = req.lifetime.arrival or time.time()
        await self._route(req)
        if self.gate is not None:
            self.gate.admit(req, self._queued_tokens)  # refuses before any prefill
        if self._queued >= self.max_queued:
            metrics.REQUESTS.labels("overloaded").inc()
            raise Overloaded(f"router queue full ({self._queued} waiting)")
        self._queued += 1
        self._queued_tokens += len(req.prompt_ids)
        waited = self._admission.locked()
        try:
            await self._admission.acquire()
        finally:
            self._queued -= 1
            self._queued_tokens -= len(req.prompt_ids)
        if waited:  # the caches and queues it was routed by at arrival have moved on meanwhile
            try:
                await self._route(req)
            except BaseException:
                self._admission.release()
                raise
        outcome = "error"
        n_tokens = 0
        try:
            async with aclosing(merge(self._choices(req))) as chunks:  # closed now, not when collected
                async for chunk in chunks:
                    if n_tokens == 0:
                        req.lifetime.first_token = time.time()
                    req.cached_tokens = max(req.cached_tokens, chunk.cached_tokens)
                    req.decode_cached_tokens = max(req.decode_cached_tokens, chunk.decode_cached_tokens)
                    n_tokens += len(chunk.token_ids)
                    yield chunk
            outcome = "ok"
        except (GeneratorExit, asyncio.CancelledError):
            outcome = "cancelled"
            raise
        finally:
            self._admission.release()
            req.lifetime.finish = time.time()
            metrics.REQUESTS.labels(outcome).inc()
            if outcome == "ok":
                self._observe(req, n_tokens)
                if self.gate is not None:
                    self.gate.finished(req, n_tokens)
                await self._record(req, n_tokens)

    async def _route(self, req: RouterRequest) -> None:
        """The prefill instance, decode instance and path by the prefix cache (routing by the model)."""
        if self.prefix_router is not None:
            req.prefill_pick, req.route = await self.prefix_router.route(
                req.prompt_ids, req.cache_namespace, req.params.max_tokens,
                paths=self.mode == "disagg" and req.n == 1 and req.params.prompt_logprobs is None,
                prefills_role="prefill" if self.mode == "disagg" else self.mode)

    def _choices(self, req: RouterRequest) -> list[AsyncIterator[Chunk]]:
        if req.n == 1:
            return [self._choice(req, self._disagg(req) if self.mode == "disagg" else self._colocated(req))]
        if self.mode != "disagg":  # one instance call for the n choices, which share the prompt's K/V there
            stream = SharedStream(req.n, lambda: self._colocated(req), lambda i: self._end_choice(req, i))
            return [self._choice(req.choice(i, None), stream.choice(i), partial(stream.stop, i)) for i in range(req.n)]
        # The prefill only leases the K/V: it must not finish at its first token, which no choice uses.
        params = replace(req.params, max_tokens=max(2, req.params.max_tokens), ignore_eos=True, stop_token_ids=())
        shared = SharedPrefill(req.n, partial(self._shared_prefill, req, params), self.release_lease)
        choices = [req.choice(i, shared) for i in range(req.n)]
        return [self._choice(choice, self._disagg(choice)) for choice in choices]

    async def _shared_prefill(self, req: RouterRequest, params: SamplingParams) -> worker_pb2.PrefillResponse:
        """The n choices' one prefill, retried on other instances under the policy; never re-prefilled as one:
        each choice whose decode cannot have its K/V re-prefills on its own (`_disagg`)."""
        retry = Retries(self.dispatcher, self.retries, 0, partial(self._blame, req), req.request_id)
        while True:
            assignment = await retry.book("prefill", self._prefill_load(req, req.prompt_ids), self._preferred(req))
            try:
                return await self._prefill(req, req.prompt_ids, params, assignment, pulls=req.n)
            except Exception as exc:
                await retry.after(exc, assignment)  # raises unless another instance may take it

    async def _choice(self, req: RouterRequest, source: AsyncIterator[worker_pb2.TokenChunk],
                      stopped: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[Chunk]:
        """One choice's text: detokenized, ended at a stop string (which closes the source: the downstream
        calls are cancelled and the K/V freed; a choice of a shared colocated call tells `stopped` first)."""
        text = OutputText(self.tokenizer, req.params.stop, req.prompt_ids, req.params.skip_special_tokens,
                          req.params.spaces_between_special_tokens)
        async with aclosing(source):
            async for tokens in source:
                reason = tokens.finish_reason
                delta = text.push(list(tokens.token_ids), final=bool(reason))
                logprobs = logprobs_from_proto(tokens.logprobs[: len(delta.token_ids)])
                yield Chunk(delta.token_ids, delta.text, "stop" if delta.stopped else reason, req.index, logprobs,
                            logprobs_from_proto(tokens.prompt_logprobs), tokens.cached_tokens,
                            tokens.decode_cached_tokens, delta.starts)
                if delta.stopped:
                    if stopped is not None and not reason:
                        await stopped()
                    return

    # ---- disaggregated: prefill instance, then decode instance -------------------------------------

    async def _disagg(self, req: RouterRequest) -> AsyncIterator[worker_pb2.TokenChunk]:
        """Prefill then decode, one instance call per turn of one loop. After a failed call the retry policy
        (`Retries.after`) names the next turn: the same call on another instance (a decode from the same K/V, while
        it streamed nothing), or a re-prefill of the prompt plus the tokens already streamed, so the client sees no
        token twice and none lost (sampling is keyed by position, and a grammar reads the streamed tokens first:
        `resumed_tokens`). A re-prefill goes the plain way ("pull")."""
        retry = Retries(self.dispatcher, self.retries, self.retries, partial(self._blame, req), req.request_id)
        produced: list[int] = []
        path = "shared" if req.shared is not None else req.route.path
        prefix: kv_pb2.KVHandle | None = None  # reverse: the decode instance's lease of its cached prefix, until taken
        prefilled: worker_pb2.PrefillResponse | None = None  # the K/V the decodes pull, leased at the prefill
        streamed = False  # since the last (re-)prefill: a decode ended that lease by pulling it
        try:
            if path not in ("shared", "local"):
                self._took(req, path)
            if path == "reverse":
                prefix = await self.cleanups.claim(self._lease_prefix(req, req.prompt_ids), self._end_prefix)
            prompt_ids, params = self._resumed(req, produced)
            while True:
                assignment: Assignment | None = None
                try:
                    if path == "local":
                        async with aclosing(self._local(req, prompt_ids, params)) as local:
                            async for chunk in local:
                                if not streamed:
                                    streamed = True
                                    self._took(req, "local")
                                produced.extend(chunk.token_ids)
                                yield chunk
                        return
                    if prefilled is None and path == "shared" and req.shared is not None:
                        prefilled = await req.shared.get()  # the choices' one prefill, which samples no token for them
                    elif prefilled is None:
                        assignment = await retry.book("prefill", self._prefill_load(req, prompt_ids), self._preferred(req))
                        prefilled = await self.cleanups.claim(
                            self._prefill(req, prompt_ids, params, assignment, prefix=prefix), self._end_lease)
                        prefix, assignment = None, None  # the prefill took the prefix lease
                        retry.next_call()
                        yield worker_pb2.TokenChunk(token_ids=[prefilled.first_token], finish_reason=prefilled.finish_reason,
                                                    logprobs=prefilled.logprobs, prompt_logprobs=prefilled.prompt_logprobs,
                                                    cached_tokens=prefilled.cached_tokens if req.attempt == 0 else 0)
                        produced.append(prefilled.first_token)
                        if prefilled.finish_reason:
                            return
                    # Before the first decoded token the K/V may still be leased at the source: another decode
                    # instance may pull it (the K/V gone, the policy re-prefills).
                    assignment = await self.cleanups.claim(
                        retry.book("decode", len(prompt_ids) + params.max_tokens,
                                   req.route.decode_id if req.attempt == 0 and path != "shared" else ""),
                        self.dispatcher.release)
                    req.decode_instance = assignment.info.id
                    decoded = self._decode(req, prompt_ids, params, prefilled, assignment, sample_first=path == "shared")
                    async with aclosing(decoded):
                        async for chunk in decoded:
                            if path == "shared" and not streamed:  # every choice gets the prompt's logprobs, once
                                chunk.prompt_logprobs.extend(prefilled.prompt_logprobs)
                                chunk.cached_tokens = prefilled.cached_tokens
                            streamed = True
                            produced.extend(chunk.token_ids)
                            yield chunk
                    return
                except Exception as exc:
                    if path == "local" and not streamed and _declined(exc):  # the prefill instance's way instead
                        log.info("local prefill not taken (%s); pulling", exc, extra={"request_id": req.request_id})
                        path = "pull"
                        self._took(req, path)
                        continue
                    # one try for the shared K/V: a choice whose decode fails re-prefills, that K/V being another's too
                    if await retry.after(exc, assignment, elsewhere=not streamed and path != "shared") is Next.RE_PREFILL:
                        await self._let_go(path, req, prefix, prefilled, streamed)
                        path, prefix, prefilled, streamed = "pull", None, None, False
                        req.attempt += 1
                        prompt_ids, params = self._resumed(req, produced)
        finally:
            await self._let_go(path, req, prefix, prefilled, streamed)

    @staticmethod
    def _resumed(req: RouterRequest, produced: list[int]) -> tuple[list[int], SamplingParams]:
        """An attempt's prompt and sampling after `produced` tokens streamed (the prompt's logprobs came with the
        first token: a re-prefill of prompt + output does not ask again)."""
        return req.prompt_ids + produced, replace(
            req.params, max_tokens=req.params.max_tokens - len(produced), resumed_tokens=len(produced),
            prompt_logprobs=None if produced else req.params.prompt_logprobs)

    async def _let_go(self, path: str, req: RouterRequest, prefix: kv_pb2.KVHandle | None,
                      prefilled: worker_pb2.PrefillResponse | None, streamed: bool) -> None:
        """An attempt ends (re-prefilled, done, failed or closed): a prefix lease no prefill took, and a prefill's
        lease no decode pulled, end now rather than at their expiry; a choice is done with the shared K/V."""
        if prefix is not None:
            await self.cleanups.run(self._end_prefix(prefix))
        if path == "shared" and req.shared is not None:
            await req.shared.done()
        elif prefilled is not None and not streamed:
            await self.cleanups.run(self._end_lease(prefilled))

    @staticmethod
    def _routed(req: RouterRequest) -> None:
        """Its first attempt's first instance call is being made: routing, admission and booking are done."""
        if req.attempt == 0:
            metrics.ROUTING.observe(time.time() - req.lifetime.arrival)

    @staticmethod
    def _took(req: RouterRequest, path: str) -> None:
        """The path a request's first attempt took, after any fallback: in its record and the decisions."""
        if req.attempt == 0:
            req.path = path
            DECISIONS.labels(path).inc()

    async def _end_lease(self, prefilled: worker_pb2.PrefillResponse) -> None:
        if not prefilled.finish_reason and self.release_lease is not None:
            await self.release_lease(prefilled.kv)

    async def _end_prefix(self, prefix: kv_pb2.KVHandle | None) -> None:
        if prefix is not None and self.release_lease is not None:
            await self.release_lease(prefix)

    async def _blame(self, req: RouterRequest, assignment: Assignment, exc: Exception) -> None:
        """Raises CrashedInstance when the request was in the step that killed the instance's process:
        retried, it would kill another one."""
        if isinstance(exc, grpc.aio.AioRpcError) and await self.dispatcher.killed_by(assignment.info,
                                                                                     req.downstream_id):
            log.error("%s crashed in a step with this request; not retrying it", assignment.info.id,
                      extra={"request_id": req.request_id})
            raise CrashedInstance("the instance crashed while serving this request; it is not retried") from exc

    @staticmethod
    def _preferred(req: RouterRequest) -> str:
        """The prefill instance picked at arrival, for the first attempt (a retry goes by the load book)."""
        return req.prefill_pick.instance_id if req.prefill_pick and req.attempt == 0 else ""

    @staticmethod
    def _prefill_load(req: RouterRequest, prompt_ids: list[int]) -> int:
        """The prompt tokens the prefill will compute, as booked on it: those it is not known to hold (nor to
        pull from the decode instance first)."""
        pick = req.prefill_pick
        if pick is None or req.attempt > 0:
            return len(prompt_ids)
        reverse = req.route.decode_cached if req.route.path == "reverse" else 0
        return len(prompt_ids) - max(pick.cached_tokens, reverse)

    async def _local(self, req: RouterRequest, prompt_ids: list[int],
                     params: SamplingParams) -> AsyncIterator[worker_pb2.TokenChunk]:
        """The decode instance holding most of the prompt prefills the rest itself (at most the local cap), then
        decodes; LocalPrefillDeclined when another instance was booked (that one suspect, gone or full)."""
        assignment = await self.cleanups.claim(
            self.dispatcher.acquire("decode", len(prompt_ids) + params.max_tokens, prefer=req.route.decode_id),
            self.dispatcher.release)
        if assignment.info.id != req.route.decode_id:
            await self.cleanups.run(self.dispatcher.release(assignment))
            raise LocalPrefillDeclined(f"{req.route.decode_id} could not be booked")
        req.prefill_instance = req.decode_instance = assignment.info.id
        self._routed(req)
        stub = worker_pb2_grpc.DecodeStub(self.dispatcher.channel(assignment.info.address))
        call = stub.Decode(worker_pb2.DecodeRequest(
            request_id=req.downstream_id, prompt_token_ids=prompt_ids, sampling=sampling_to_proto(params),
            cache_namespace=req.cache_namespace, local_prefill_cap=self.local_prefill_cap), timeout=req.remaining())
        async with aclosing(self._relay(req, call, assignment)) as relayed:
            async for chunk in relayed:
                yield chunk

    async def _lease_prefix(self, req: RouterRequest, prompt_ids: list[int]) -> kv_pb2.KVHandle | None:
        """A lease of the prompt's prefix cached on the decode instance, for the prefill to pull (None: none now,
        and the prefill computes it)."""
        info = self.dispatcher.instances.get(req.route.decode_id)
        if info is None:
            return None
        stub = worker_pb2_grpc.DecodeStub(self.dispatcher.channel(info.address))
        try:
            reply = await stub.LeasePrefix(worker_pb2.LeasePrefixRequest(
                prompt_token_ids=prompt_ids, cache_namespace=req.cache_namespace), timeout=5)
        except grpc.RpcError as exc:
            log.info("no prefix lease from %s (%s): prefilling it", info.id, exc.code(),
                     extra={"request_id": req.request_id})
            return None
        return reply.kv if reply.HasField("kv") else None

    async def _prefill(self, req: RouterRequest, prompt_ids: list[int], params: SamplingParams,
                       assignment: Assignment, pulls: int = 1,
                       prefix: kv_pb2.KVHandle | None = None) -> worker_pb2.PrefillResponse:
        """The prefill call on `assignment`; the booked load comes off when it ends."""
        req.prefill_instance = assignment.info.id
        self._routed(req)
        stub = worker_pb2_grpc.PrefillStub(self.dispatcher.channel(assignment.info.address))
        try:
            response = await stub.Prefill(worker_pb2.PrefillRequest(
                request_id=req.downstream_id, prompt_token_ids=prompt_ids, sampling=sampling_to_proto(params),
                pulls=pulls, cache_namespace=req.cache_namespace, prefix=prefix),
                timeout=req.remaining())
        finally:
            await self.cleanups.run(self.dispatcher.release(assignment))
        req.lifetime.merge(response.stamps)
        return response

    async def _decode(self, req: RouterRequest, prompt_ids: list[int], params: SamplingParams,
                      prefilled: worker_pb2.PrefillResponse, assignment: Assignment,
                      sample_first: bool = False) -> AsyncIterator[worker_pb2.TokenChunk]:
        """Decode from the prefill's K/V; `sample_first`: the decode samples the first token itself."""
        stub = worker_pb2_grpc.DecodeStub(self.dispatcher.channel(assignment.info.address))
        call = stub.Decode(worker_pb2.DecodeRequest(
            request_id=req.downstream_id, prompt_token_ids=prompt_ids,
            first_token=None if sample_first else prefilled.first_token,
            sampling=sampling_to_proto(replace(params, prompt_logprobs=None)), kv=prefilled.kv,
            cache_namespace=req.cache_namespace), timeout=req.remaining())
        async with aclosing(self._relay(req, call, assignment)) as relayed:
            async for chunk in relayed:
                yield chunk

    async def _relay(self, req: RouterRequest, call, assignment: Assignment) -> AsyncIterator[worker_pb2.TokenChunk]:
        """Token chunks of an instance's stream; ending early cancels the call; the booked load comes off."""
        try:
            async for chunk in call:
                if chunk.HasField("stamps"):
                    req.lifetime.merge(chunk.stamps)
                yield chunk
        finally:
            call.cancel()
            await self.cleanups.run(self.dispatcher.release(assignment))

    # ---- colocated / chunked: the whole request on one instance ------------------------------------

    async def _colocated(self, req: RouterRequest) -> AsyncIterator[worker_pb2.TokenChunk]:
        assignment = await self.cleanups.claim(
            self.dispatcher.acquire(self.mode, len(req.prompt_ids) + req.params.max_tokens, prefer=self._preferred(req)),
            self.dispatcher.release)
        req.prefill_instance = req.decode_instance = assignment.info.id
        stub = worker_pb2_grpc.ColocatedStub(self.dispatcher.channel(assignment.info.address))
        call = stub.Generate(worker_pb2.ColocatedRequest(
            request_id=req.downstream_id, prompt_token_ids=req.prompt_ids, sampling=sampling_to_proto(req.params),
            n=req.n, cache_namespace=req.cache_namespace), timeout=req.remaining())
        async with aclosing(self._relay(req, call, assignment)) as relayed:
            async for chunk in relayed:
                yield chunk

    async def _end_choice(self, req: RouterRequest, index: int) -> None:
        """A choice of a shared colocated call ended at a stop string: its instance stops generating it."""
        info = next((i for i in self.dispatcher.live(self.mode) if i.id == req.prefill_instance), None)
        if info is None:
            return
        stub = worker_pb2_grpc.ColocatedStub(self.dispatcher.channel(info.address))
        try:
            await stub.EndChoice(worker_pb2.EndChoiceRequest(request_id=req.downstream_id, index=index), timeout=5)
        except grpc.RpcError as exc:  # it ends with the call anyway
            log.info("could not end choice %d early: %s", index, exc.code(), extra={"request_id": req.request_id})

    # ---- bookkeeping -------------------------------------------------------------------------------

    def _observe(self, req: RouterRequest, n_tokens: int) -> None:
        life = req.lifetime
        metrics.TTFT.observe(life.first_token - life.arrival)
        CACHED_TOKENS.labels("prefill").inc(req.cached_tokens)
        CACHED_TOKENS.labels("decode").inc(req.decode_cached_tokens)
        metrics.E2E.observe(life.finish - life.arrival)
        if n_tokens > 1:
            metrics.TPOT.observe((life.finish - life.first_token) / (n_tokens - 1))
        for stage, seconds in life.stages().items():
            metrics.STAGE.labels(stage).observe(seconds)

    async def _record(self, req: RouterRequest, n_tokens: int) -> None:
        try:
            await self.registry.record_request(req.record(n_tokens, self.mode))
        except Exception as exc:
            if not self.registry.away:  # the breaker logs an outage once
                log.warning("could not record request: %s", exc, extra={"request_id": req.request_id})


def _declined(exc: Exception) -> bool:
    """A decode instance did not take a local prefill, before streaming: another was booked, or it declined."""
    return isinstance(exc, LocalPrefillDeclined) or (
        isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.FAILED_PRECONDITION)
