"""The cross-host baseline of bench-xfer: raw ucxx send/recv of one contiguous buffer between two
processes. `python -m services.kvxfer.bench_raw PORT_FILE MAX_BYTES` runs the receiving side."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import numpy as np

from services.kvxfer.config import KVXferConfig
from services.kvxfer.ucx_env import apply_ucx_env


def _ucxx():
    apply_ucx_env(KVXferConfig())  # the same UCX settings as the kvxfer services
    import ucxx

    return ucxx


async def receive(port_file: str, max_bytes: int) -> None:
    """Per round: an 8-byte size, that many bytes into one preallocated buffer, then a 1-byte ack."""
    ucxx = _ucxx()
    buf = np.ones(max_bytes, dtype=np.uint8)  # touched, like the pools in the bench
    done = asyncio.Event()

    async def handle(ep) -> None:
        size, ack = np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint8)
        while True:
            await ep.recv(size)
            if size[0] == 0:
                break
            await ep.recv(buf[:int(size[0])])
            await ep.send(ack)
        done.set()

    listener = ucxx.create_listener(handle, port=0)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.port))
    os.rename(port_file + ".tmp", port_file)
    await done.wait()
    listener.close()
    ucxx.stop_notifier_thread()


class RawSender:
    """The sending side, in the bench process."""

    def __init__(self, ep) -> None:
        self._ep = ep
        self._ack = np.zeros(1, dtype=np.uint8)

    @classmethod
    async def connect(cls, port: int) -> RawSender:
        return cls(await _ucxx().create_endpoint("127.0.0.1", port))

    async def timed_send(self, buf: np.ndarray) -> float:
        start = time.perf_counter()
        await self._ep.send(np.array([buf.nbytes], dtype=np.uint64))
        await self._ep.send(buf)
        await self._ep.recv(self._ack)
        return time.perf_counter() - start

    async def close(self) -> None:
        await self._ep.send(np.zeros(1, dtype=np.uint64))
        await self._ep.close()
        _ucxx().stop_notifier_thread()


if __name__ == "__main__":
    asyncio.run(receive(sys.argv[1], int(sys.argv[2])))
