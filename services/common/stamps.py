"""A request's lifecycle timestamps (docs/architecture.md §3, fixed names), carried between services."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from distserve.v1 import worker_pb2


@dataclass(slots=True)
class Lifetime:
    arrival: float = 0.0
    prefill_queued: float = 0.0
    prefill_start: float = 0.0
    prefill_end: float = 0.0
    xfer_start: float = 0.0
    xfer_end: float = 0.0
    decode_queued: float = 0.0
    decode_start: float = 0.0
    first_token: float = 0.0
    finish: float = 0.0

    def merge(self, stamps: worker_pb2.Stamps) -> None:
        """Takes the stages another service stamped (non-zero fields)."""
        for field, value in stamps.ListFields():
            setattr(self, field.name, value)

    def to_proto(self) -> worker_pb2.Stamps:
        return worker_pb2.Stamps(**{k: v for k, v in asdict(self).items() if k in worker_pb2.Stamps.DESCRIPTOR.fields_by_name})

    def stages(self) -> dict[str, float]:
        """Seconds spent per stage (the paper's figure 10 breakdown); stages a mode lacks are omitted."""
        out = {}
        if self.prefill_start:
            out["prefill_queue"] = self.prefill_start - self.prefill_queued
            out["prefill"] = self.prefill_end - self.prefill_start
        if self.xfer_start:
            out["transfer"] = self.xfer_end - self.xfer_start
            out["decode_queue"] = (self.xfer_start - self.decode_queued) + max(0.0, self.decode_start - self.xfer_end)
        if self.decode_start:
            out["decode"] = self.finish - self.decode_start
        return out

    def to_record(self) -> dict[str, float]:
        return asdict(self)
