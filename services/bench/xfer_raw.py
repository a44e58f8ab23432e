"""The cross-host baseline of bench-xfer: raw ucxx send/recv of one contiguous buffer between two
processes. `python -m services.bench.xfer_raw PORT_FILE MAX_BYTES [DEVICE]` runs the receiving side (its buffer
on DEVICE, cpu or cuda:N)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import numpy as np

from services.kvxfer.config import KVXferConfig
from services.kvxfer.ucx.env import apply_ucx_env


def _ucx_loop():
    """UCX as the kvxfer services set it up: their settings, progress on the event loop."""
    apply_ucx_env(KVXferConfig())
    from services.kvxfer.ucx.loop import UcxLoop

    return UcxLoop()


def touched_buffer(nbytes: int, device: str):
    """nbytes with every page touched, like the bench's pools: numpy on the host, torch on a GPU."""
    if device == "cpu":
        return np.ones(nbytes, dtype=np.uint8)
    import torch

    return torch.ones(nbytes, dtype=torch.uint8, device=device)


async def receive(port_file: str, max_bytes: int, device: str = "cpu") -> None:
    """Per round: an 8-byte size, that many bytes into one preallocated buffer, then a 1-byte ack."""
    ucx = _ucx_loop()
    buf = touched_buffer(max_bytes, device)
    done = asyncio.Event()

    async def handle(ep) -> None:
        size, ack = np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint8)
        while True:
            await ucx.recv(ep, size, 0)
            if size[0] == 0:
                break
            await ucx.recv(ep, buf[:int(size[0])], 0)
            await ucx.send(ep, ack, 0)
        done.set()

    listener = ucx.listen(handle, 0)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.port))
    os.rename(port_file + ".tmp", port_file)
    await done.wait()
    listener.close()
    ucx.close()


class RawSender:
    """The sending side, in the bench process."""

    def __init__(self, ucx, ep) -> None:
        self._ucx = ucx
        self._ep = ep
        self._ack = np.zeros(1, dtype=np.uint8)

    @classmethod
    async def connect(cls, port: int) -> RawSender:
        ucx = _ucx_loop()
        return cls(ucx, await ucx.connect("127.0.0.1", port, 5.0))

    async def timed_send(self, buf: np.ndarray) -> float:
        start = time.perf_counter()
        await self._ucx.send(self._ep, np.array([buf.nbytes], dtype=np.uint64), 0)
        await self._ucx.send(self._ep, buf, 0)
        await self._ucx.recv(self._ep, self._ack, 0)
        return time.perf_counter() - start

    async def close(self) -> None:
        await self._ucx.send(self._ep, np.zeros(1, dtype=np.uint64), 0)
        self._ucx.abort(self._ep)
        self._ucx.close()


if __name__ == "__main__":
    asyncio.run(receive(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "cpu"))
