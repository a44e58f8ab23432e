"""Simulated prefill and decode instances, advanced in time by the simulator's dispatch loop.

Both are driven the same way: `advance(t)` runs every batch that starts before t, `load(t)` is what a router
sees when it picks an instance, `enqueue` hands it a request. Times are seconds; requests are integer ids
into the simulator's arrays.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from operator import attrgetter

from services.common.step_model.attended import FULL
from services.common.step_model.latency import TPCoefficients
from services.common.step_model.shape import ModelShape

INF = float("inf")


class PrefillInstance:
    """FCFS queue; a batch takes queued prompts while their uncached tokens fit in `max_batch_tokens` (Lm), a longer
    prompt runs alone; the batch then crosses `pp` pipeline stages of equal share, stage 0 taking the next batch as
    soon as it is free. A prompt's tokens found in the prefix cache (`cached`) are not computed: the batch is
    charged its uncached tokens and their attention over the cached prefix (`prompt_sq`), a sliding layer's over
    its window (`shape.attended`)."""

    def __init__(self, coeffs: TPCoefficients, pp: int, max_batch_tokens: int, prompt: list[int],
                 done_at: list[float], cached: list[int] | None = None, shape: ModelShape | None = None) -> None:
        self.coeffs, self.pp, self.max_batch_tokens = coeffs, pp, max_batch_tokens
        self.prompt_sq = (shape.attended if shape else FULL).prompt_sq
        self.done_at = done_at  # shared array: prefill end times out
        self.cached = cached or [0] * len(prompt)
        self.new = [p - c for p, c in zip(prompt, self.cached)]  # tokens each prompt computes
        self.queue: deque[int] = deque()
        self.arrival: dict[int, float] = {}
        self.queued_tokens = 0
        self.stage_free = [0.0] * pp
        self.busy_tokens = 0

    def load(self, t: float) -> int:
        """Prompt tokens to compute waiting or in stage 0 at time t."""
        return self.queued_tokens + (self.busy_tokens if self.stage_free[0] > t else 0)

    def enqueue(self, rid: int, t: float) -> None:
        self.queue.append(rid)
        self.arrival[rid] = t
        self.queued_tokens += self.new[rid]

    def advance(self, t: float) -> None:
        """Run every batch whose stage 0 starts before t."""
        queue, new, cached, prompt_sq = self.queue, self.new, self.cached, self.prompt_sq
        while queue:
            start = max(self.stage_free[0], self.arrival[queue[0]])
            if start >= t:
                return
            batch = [queue.popleft()]
            tokens = new[batch[0]]
            while queue and tokens + new[queue[0]] <= self.max_batch_tokens:
                tokens += new[queue[0]]
                batch.append(queue.popleft())
            self.queued_tokens -= tokens
            self.busy_tokens = tokens
            stage = self.coeffs.prefill_time(tokens, sum(prompt_sq(new[r], cached[r]) for r in batch)) / self.pp
            end = start
            for k in range(self.pp):
                end = max(end, self.stage_free[k]) + stage
                self.stage_free[k] = end
            for rid in batch:
                self.done_at[rid] = end
                del self.arrival[rid]


class _Lane:
    """One micro-batch circulating through the decode pipeline: a continuous batch of its own. Where some layers
    attend to a sliding window, `windowed` is Σ min(L, window) over its sequences of L tokens: it grows by the
    `growing` ones still shorter than the window, each leaving that count at its step in `crossings`."""

    __slots__ = ("next_time", "active", "steps", "context", "size", "windowed", "growing", "crossings")

    def __init__(self) -> None:
        self.next_time = INF  # next step boundary; INF while idle
        self.active: list[tuple[int, int]] = []  # heap of (step at which it finishes, request id)
        self.steps = 0
        self.context = 0
        self.size = 0
        self.windowed = 0
        self.growing = 0
        self.crossings: list[int] = []  # heap of the steps at which a sequence reaches the window


_next_time = attrgetter("next_time")


class DecodeInstance:
    """Continuous batching with a KV capacity: a queued request is admitted at a step boundary (FCFS) once its
    prompt + output tokens fit; `pp` stages keep `pp` micro-batches (lanes) in flight, so a token of one lane
    takes a full-model step while the lanes together run pp times the steps. With a `shape`, a request holds the
    K/V its layer groups keep (`kv_tokens`) and a step's attention term counts a sliding layer's window only."""

    def __init__(self, coeffs: TPCoefficients, pp: int, capacity: int, prompt: list[int], output: list[int],
                 start_at: list[float], finish_at: list[float],
                 on_finish: Callable[[int, float], None] | None = None, join_s: float = 0.0,
                 shape: ModelShape | None = None) -> None:
        self.coeffs, self.capacity, self.on_finish, self.join_s = coeffs, capacity, on_finish, join_s
        self.kv_tokens: Callable[[int], int] = shape.kv_tokens if shape else int
        attended = shape.attended if shape else FULL
        self.window, self.sliding = attended.window, attended.sliding
        self.prompt, self.output, self.start_at, self.finish_at = prompt, output, start_at, finish_at
        self.lanes = [_Lane() for _ in range(pp)]
        self.queue: deque[int] = deque()
        self.queued_tokens = 0
        self.reserved = 0

    def load(self, t: float) -> int:
        """KV tokens reserved by running requests plus those of queued ones."""
        return self.reserved + self.queued_tokens

    def need(self, rid: int) -> int:
        """KV tokens request `rid` holds at its end."""
        return self.kv_tokens(self.prompt[rid] + self.output[rid])

    def enqueue(self, rid: int, t: float) -> None:
        need = self.need(rid)
        if need > self.capacity:
            raise ValueError(f"request of {need} KV tokens exceeds the decode KV capacity of {self.capacity}")
        if self.output[rid] <= 1:
            self.start_at[rid] = self.finish_at[rid] = t
            return
        self.queue.append(rid)
        self.queued_tokens += need
        self._wake(t)

    def _wake(self, t: float) -> None:
        for lane in self.lanes:
            if lane.next_time == INF:
                lane.next_time = t
                return

    def advance(self, t: float) -> None:
        """Run every step boundary before t."""
        lanes = self.lanes
        if len(lanes) == 1:
            lane = lanes[0]
            while lane.next_time < t:
                self._step(lane)
            return
        while True:
            lane = min(lanes, key=_next_time)
            if lane.next_time >= t:
                return
            self._step(lane)

    def _admit(self, lane: _Lane, now: float) -> int:
        """Admits queued requests into `lane` at its step boundary; returns how many joined."""
        queue, joined, window = self.queue, 0, self.window
        if not queue:
            return 0
        share = -(-(sum(x.size for x in self.lanes) + len(queue)) // len(self.lanes))  # keep lanes even
        while queue and lane.size < share:
            rid = queue[0]
            need = self.need(rid)
            if self.reserved + need > self.capacity:
                return joined
            queue.popleft()
            self.queued_tokens -= need
            self.reserved += need
            self.start_at[rid] = now
            heapq.heappush(lane.active, (lane.steps + self.output[rid] - 1, rid))
            lane.context += self.prompt[rid] + 1
            lane.size += 1
            if window:
                start = self.prompt[rid] + 1
                lane.windowed += min(start, window)
                if start < window:
                    lane.growing += 1
                    if self.prompt[rid] + self.output[rid] > window:
                        heapq.heappush(lane.crossings, lane.steps + window - start)
            joined += 1
        return joined

    def _step(self, lane: _Lane) -> None:
        now = lane.next_time
        joined = self._admit(lane, now)
        if not lane.size:
            lane.next_time = INF
            return
        window = self.window
        context = lane.context - self.sliding * (lane.context - lane.windowed) if window else lane.context
        end = now + self.coeffs.decode_time(context, lane.size) + self.join_s * joined
        lane.steps += 1
        lane.context += lane.size
        if window:
            lane.windowed += lane.growing
            while lane.crossings and lane.crossings[0] <= lane.steps:
                heapq.heappop(lane.crossings)
                lane.growing -= 1
        active = lane.active
        while active and active[0][0] <= lane.steps:
            _, rid = heapq.heappop(active)
            self.finish_at[rid] = end
            if self.on_finish is not None:
                self.on_finish(rid, end)
            total = self.prompt[rid] + self.output[rid]
            lane.context -= total
            lane.size -= 1
            if window:
                lane.windowed -= min(total, window)
                if total <= window:  # still growing at its end
                    lane.growing -= 1
            self.reserved -= self.need(rid)
        lane.next_time = end
        if self.queue:
            self._wake(end)
