"""The planner's Actuator for docker compose: keeps one compose file per host in step with the instances the
planner starts and stops.

Writing the files is all it does. The operator applies them on each host with
`docker compose -f docker-compose.nodeN.yml up -d --remove-orphans`: compose starts the new services and sends
SIGTERM to the removed ones, which deregister from Redis (no new requests), finish what they hold, and exit.
"""

from __future__ import annotations

from itertools import count
from pathlib import Path

import yaml

from services.deploy.compose import compose_files, file_name, instances_of, write_files
from services.deploy.compose_monitoring import write_monitoring
from services.planner.actuation import InstanceSpec, RunningInstance


class ComposeActuator:
    """Actuator over the compose files in `out`, one per address in `addresses` (node 0 first)."""

    def __init__(self, out: Path, addresses: tuple[str, ...]) -> None:
        self.out, self.addresses = out, addresses
        self.instances: dict[str, InstanceSpec] = {}
        for node in range(len(addresses)):
            path = out / file_name(node)
            if path.exists():
                self.instances.update(instances_of(yaml.safe_load(path.read_text())))

    def running(self) -> list[RunningInstance]:
        """The instances in the files: what runs once they are applied."""
        return [RunningInstance(name, spec) for name, spec in self.instances.items()]

    def start(self, spec: InstanceSpec) -> str:
        """Add a service for the instance (the first free `role-N` name); it starts when the file is applied."""
        name = next(f"{spec.role}-{i}" for i in count() if f"{spec.role}-{i}" not in self.instances)
        self._write({**self.instances, name: spec})
        return name

    def drain(self, instance_id: str) -> None:
        """Nothing to write: a removed service drains itself when compose stops it (SIGTERM, then the grace period)."""

    def stop(self, instance_id: str) -> None:
        """Remove the instance's service."""
        self._write({name: spec for name, spec in self.instances.items() if name != instance_id})

    def write(self) -> None:
        """Write every host's file from the instances held now."""
        self._write(self.instances)

    def _write(self, instances: dict[str, InstanceSpec]) -> None:
        write_files(compose_files(instances, self.addresses), self.out)  # raises before writing when refused
        write_monitoring(instances, self.addresses, self.out)  # Prometheus scrapes what the files now run
        self.instances = instances
