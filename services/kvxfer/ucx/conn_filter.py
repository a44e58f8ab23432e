"""Which peers may connect to kvxfer's UCX listener, checked on each connection request before an endpoint exists.

ucxx's listener takes a port and no address, so it accepts TCP on every interface. UCX hands each connection
request to a callback first; there `ucp_conn_request_query` gives the client's address, and a request from
outside the allowed networks is rejected with `ucp_listener_reject`: no endpoint is made, no message (hello,
order) is read. The small C helper `ucp_conn.c` does the two UCP calls, built on first use like iov.py's.

Allowed (`--ucx-allow`, comma-separated networks): given, exactly those; empty, loopback only for a kvxfer
serving on loopback, anyone (the hello token decides) otherwise.
"""

from __future__ import annotations

import ctypes
import functools
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import libucx
import libucxx

from services.common.cbuild import load_kernel
from services.common.net import is_loopback

HERE = Path(__file__).parent
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@functools.cache
def helper() -> ctypes.CDLL | None:
    """The compiled ucp_conn.c, or None where it cannot be built or C kernels are off (`DISTSERVE_CPU_KERNELS=0`)."""
    ucx, ucxx_lib = Path(libucx.__file__).parent, Path(libucxx.__file__).parent / "lib64"
    lib = load_kernel("ucp_conn", HERE, (f"-I{ucx / 'include'}", f"-L{ucx / 'lib'}", f"-Wl,-rpath,{ucx / 'lib'}",
                                         f"-L{ucxx_lib}", f"-Wl,-rpath,{ucxx_lib}", "-lucp", "-lucs", "-lucxx"))
    if lib is None:
        return None
    lib.conn_client.argtypes, lib.conn_client.restype = (ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int), ctypes.c_int
    lib.conn_reject.argtypes, lib.conn_reject.restype = (ctypes.c_void_p, ctypes.c_uint64), ctypes.c_int
    return lib


@dataclass(frozen=True, slots=True)
class PeerFilter:
    networks: tuple[Network, ...]

    def admits(self, ip: str) -> bool:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        address = getattr(address, "ipv4_mapped", None) or address  # an IPv6 socket's view of an IPv4 peer
        return any(address in network for network in self.networks)


def peer_filter(allow: str, host: str) -> PeerFilter | None:
    """The filter for `--ucx-allow` on a kvxfer serving on `host`; None: anyone. ValueError naming a bad network."""
    networks = []
    for item in (part.strip() for part in allow.split(",")):
        if item:
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError as e:
                raise ValueError(f"ucx_allow: {e}") from None
    if networks:
        return PeerFilter(tuple(networks))
    return PeerFilter(LOOPBACK) if is_loopback(host) else None


def client_address(request: int) -> str | None:
    """The client's IP address of a UCX connection request, or None if UCP cannot tell."""
    text = ctypes.create_string_buffer(64)
    return text.value.decode() if helper().conn_client(request, text, len(text)) == 0 else None


def reject(listener_ptr: int, request: int) -> None:
    """Refuse the connection request on the ucxx listener at `listener_ptr` (UCXListener.ucxx_ptr)."""
    helper().conn_reject(listener_ptr, request)
