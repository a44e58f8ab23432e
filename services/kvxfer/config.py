"""kvxfer's configuration: flags of `distserve kvxfer`, or DISTSERVE_KVXFER_* environment variables."""

from __future__ import annotations

import socket

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common import defaults


class KVXferConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTSERVE_KVXFER_", frozen=True)

    host: str = Field("127.0.0.1", description="address to serve gRPC and UCX on; written into KV handles")
    port: int = Field(50061, description="gRPC port (0: any free port)")
    ucx_port: int = Field(0, description="UCX listener port for pulls from other hosts (0: any free port)")
    metrics_port: int = Field(0, description="Prometheus metrics HTTP port (0: disabled)")
    host_id: str = Field(default_factory=socket.gethostname, description="name of this host in Describe")
    lease_ttl_s: float = Field(defaults.LEASE_TTL_S, gt=0, description="lease lifetime when CreateLease gives none")
    expiry_interval_s: float = Field(0.05, gt=0, description="how often expired leases are ended")
    pull_timeout_s: float = Field(30.0, gt=0, description="upper bound on one cross-host pull, connecting included (a shorter client deadline wins)")
    connect_timeout_s: float = Field(5.0, gt=0, description="bound on connecting to another host's kvxfer")
    ucx_allow: str = Field("", description="networks (comma-separated, e.g. 10.0.0.0/24) whose peers may connect "
                                           "to the UCX listener; others are rejected before any message. '': "
                                           "loopback only on a loopback host, else anyone with the hello token")
    encrypt_kv: bool = Field(False, description="encrypt the KV bytes of pulls between hosts (UCX) with AES-GCM under a "
                                                "key derived from the deployment secret (needs DISTSERVE_SECRET_FILE); "
                                                "every kvxfer of a deployment must agree. GPU pools then go through "
                                                "host memory (no GPU-direct)")
    ucx_tls: str = Field("", description="UCX_TLS for this process when unset in the environment ('': UCX's choice)")
    ucx_rndv_scheme: str = Field("put_zcopy", description="UCX_RNDV_SCHEME when unset in the environment; "
                                                          "put_zcopy doubles TCP throughput over auto")
    ucx_tcp_seg_size: str = Field("128k", description="UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE when unset in the "
                                                    "environment: a 64 KB block goes in one TCP segment, not 8 "
                                                    "(UCX's 8k default)")
    ucx_rndv_thresh: str = Field("256k", description="UCX_RNDV_THRESH when unset in the environment: smaller "
                                                     "messages go eagerly, saving the rendezvous round trip; "
                                                     "frames of MBs stay zero-copy")
