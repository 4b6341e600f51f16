"""A real S3-compatible server for the tests: moto's server mode (`moto[server]`), started as a
process of its own on 127.0.0.1 and a free port, once per test module, ended by its process id.
Tests using it are skipped, with the reason, where s3fs or moto is missing or the server does not
answer in time.

The server logs one line per request; its output goes to an unnamed temporary file, never to a
pipe: nobody reads a pipe while the tests run, and once its 64 KiB are full (some 600 requests)
every request thread of the server blocks in that log write, so the server stops answering every
client and the test hangs (and at exit its logging shutdown waits for those threads forever)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
_CLEARED = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE")


@dataclass
class S3Server:
    endpoint: str
    env: dict[str, str]  # the variables a process needs to reach the server (credentials, endpoint)

    def bucket(self) -> str:
        """A new, empty bucket: its name."""
        import s3fs

        name = f"b-{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=self.endpoint, key="testing",
                          secret="testing").mkdir(name)
        return name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clear_filesystems() -> None:
    """fsspec keeps one file system per set of options: one made for another server's endpoint
    (read from the environment) must not be reused."""
    with contextlib.suppress(ImportError):
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()


@contextlib.contextmanager
def running_server(timeout: float = 60) -> Iterator[S3Server]:
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'loopwright[s3]')")
    pytest.importorskip("moto.server", reason="moto's server mode is not installed (pip install 'moto[server]')")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile()  # the server's request log: a file, never a pipe (see the module)
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except urllib.error.HTTPError:  # it answers (refusing an unsigned request: authentication is on)
                break
            except Exception:  # noqa: BLE001 - not answering yet
                if process.poll() is not None or time.monotonic() > deadline:
                    error = _tail(log) if process.poll() is not None else ""
                    pytest.skip(f"the S3 test server (moto) did not start on {endpoint} within {timeout:g} s: {error}")
                time.sleep(0.2)
        env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
        with pytest.MonkeyPatch.context() as patch:
            for name in _CLEARED:
                patch.delenv(name, raising=False)
            for name, value in env.items():
                patch.setenv(name, value)
            _clear_filesystems()
            yield S3Server(endpoint, env)
    finally:
        _clear_filesystems()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _tail(log: IO[bytes], size: int = 1000) -> str:
    """The end of the server's log."""
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-size:]


def process_env(server: S3Server) -> dict[str, str]:
    """The environment of a subprocess that uses the server (the repository on its path)."""
    from tests.helpers.launch import torchrun_env

    env = torchrun_env()
    for name in _CLEARED:
        env.pop(name, None)
    return {**env, **server.env}
