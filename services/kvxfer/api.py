"""kvxfer's client side: the one module of kvxfer that other packages import (an import contract in
pyproject.toml keeps it so). A worker registers its pool, leases blocks, keeps the leases' ends, pulls whole
blocks or byte ranges; the router ends the leases of a handle nobody will pull. Everything else in kvxfer is the
service itself: leases and copies (core, leases, pools, ranged), the UCX transport (ucx/), its server and CLI.
"""

from services.kvxfer.client import KVXferClient, PullFailed, pull_credential
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.handles import handle_leases, release_handle, site_handles
from services.kvxfer.lease_keeper import LeaseKeeper
from services.kvxfer.ranged import RangeCopy

__all__ = ["Failure", "KVXferClient", "LeaseKeeper", "PullFailed", "RangeCopy", "XferError", "handle_leases",
           "pull_credential", "release_handle", "site_handles"]
