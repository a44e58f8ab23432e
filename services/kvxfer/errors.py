"""Why a kvxfer operation failed, as an enum the gRPC layer maps to status codes."""

from __future__ import annotations

import enum


class Failure(enum.Enum):
    BAD_REQUEST = "bad request"          # unknown pool, bad block ids, layouts that differ
    NOT_FOUND = "not found"              # the source instance is not registered where the handle says
    LEASE_GONE = "lease gone"            # unknown, released or expired lease
    UNAVAILABLE = "source unavailable"   # source kvxfer unreachable, connection reset
    TIMEOUT = "timeout"
    DATA_LOSS = "data loss"              # length or checksum mismatch: the KV is not used
    MISCONFIGURED = "misconfigured"      # the two kvxfers of a pull disagree on KV encryption


class XferError(Exception):
    def __init__(self, failure: Failure, message: str) -> None:
        self.failure = failure
        super().__init__(message)
