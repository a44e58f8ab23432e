"""The served request path's fixed costs, which no forward pass shows: hops between the services and the
commands that wait for an engine's step boundary. The simulator adds them when given (`simulate(serving=...)`);
`distserve bench` measures them on the stack it serves (`services.bench.served`).

Path of a request in the served stack (docs/architecture.md §3) and where each cost falls:
client → router → prefill queue (`to_prefill`) · prefill batches · first token at the client `first_token` after
its step ends · the decode request reaches the decode instance `to_decode` after the step ends · its blocks are
reserved (`reserve`; at once, not at a step boundary) · the K/V is pulled (the transfer) · it joins the
batch at the next step boundary after `admit` · every token reaches the client `token` after its step ends.
A hand-off also costs the decode engine `join` of its time (the Decode RPC, the pull's RPC and the admission run
on the engine's core): the step the request joins takes that much longer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServingOverheads:
    to_prefill: float = 0.0  # s: client send → queued at the prefill instance
    first_token: float = 0.0  # s: prefill step end → first token at the client
    to_decode: float = 0.0  # s: prefill step end → decode request at the decode instance
    reserve: float = 0.0  # s: block reservation
    admit: float = 0.0  # s: pull done → ready to join the next step
    token: float = 0.0  # s: decode step end → its token at the client
    join: float = 0.0  # s of decode-engine time per hand-off (its RPCs share the engine's core), on the join step

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.__slots__}
