"""The client side of test_netns.py, run inside namespace B (the test's own process cannot reach
either namespace): registers the test's source pool with kvxfer A (namespace A, across the veth
pair) and its destination pool with kvxfer B, leases blocks at A and pulls them through B. With
spec["sniff"] (B's end of the veth pair) it captures every frame crossing it meanwhile (a raw AF_PACKET
socket) and counts where spec["pattern"] shows in them.

    python -m tests.integration.kvxfer.netns_driver SPEC_JSON     # prints {"pulls": [...], "sniffed": ...}
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading

import torch

from services.common.auth import instance_principal
from services.common.kv_layout import KVLayout
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient

ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33  # root: a buffer large enough that no frame of the pulls is dropped
CAPTURE_LIMIT = 256 << 20


class Sniffer:
    """Captures the frames crossing one network device (both directions) on a thread, till stopped."""

    def __init__(self, device: str) -> None:
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 256 << 20)
        self._sock.bind((device, 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self.captured = bytearray()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Reads until stopped and the socket's queue is drained: on a busy host the thread lags the wire, and
        frames still queued when the pulls end belong to them."""
        while len(self.captured) < CAPTURE_LIMIT:
            try:
                self.captured += self._sock.recv(1 << 18)
            except TimeoutError:
                if self._stop.is_set():
                    return

    def stop(self) -> bytes:
        self._stop.set()
        self._thread.join()
        self._sock.close()
        return bytes(self.captured)


async def drive(spec: dict) -> list[dict]:
    """Sequential pulls, then the same number again concurrently; results in the order of spec["pulls"]."""
    layout = KVLayout(**spec["layout"])
    a, b = KVXferClient(spec["a"], instance_principal("p0")), KVXferClient(spec["b"], instance_principal("d0"))
    try:
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        # The test's pool files, mapped again here (a file of the layout's size is left as it is).
        await a.register_pool("p0", KVPool(layout, torch.device("cpu"), spec["src_path"]).site)
        await b.register_pool("d0", KVPool(layout, torch.device("cpu"), spec["dst_path"]).site)

        async def pull(src_blocks: list[int], dst_blocks: list[int]) -> dict:
            handle = await a.create_lease("p0", src_blocks, num_tokens=len(src_blocks) * layout.block_size)
            result = await b.pull(handle, "d0", dst_blocks, checksum=True, timeout_s=20)
            return {"nbytes": result.nbytes, "path": result.path}

        half = len(spec["pulls"]) // 2
        results = [await pull(s, d) for s, d in spec["pulls"][:half]]
        results += await asyncio.gather(*(pull(s, d) for s, d in spec["pulls"][half:]))
        async with asyncio.timeout(5):  # the source releases a lease when the ack crosses back
            while (await a.stats()).live_leases:
                await asyncio.sleep(0.01)
        return results
    finally:
        await a.close()
        await b.close()


def main(spec: dict) -> dict:
    sniffer = Sniffer(spec["sniff"]) if spec.get("sniff") else None
    pulls = asyncio.run(drive(spec))
    if sniffer is None:
        return {"pulls": pulls}
    captured = sniffer.stop()
    return {"pulls": pulls, "sniffed": {"bytes": len(captured),
                                        "pattern_seen": captured.count(bytes.fromhex(spec["pattern"]))}}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
