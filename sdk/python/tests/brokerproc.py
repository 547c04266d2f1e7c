"""Runs `harbinger serve` as a child process for the tests.

The binary is $HARBINGER_BIN when set (.ci/run builds it once for every
SDK), else it is built from the repository into a temporary directory.
Readiness is the broker's own "serving" log line, which names the address
it bound; nothing sleeps to wait for it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[3]
_built: Optional[str] = None
_build_lock = threading.Lock()


def binary() -> str:
    global _built
    env = os.environ.get("HARBINGER_BIN")
    if env:
        return env
    with _build_lock:
        if _built is None:
            out = os.path.join(tempfile.mkdtemp(prefix="harbinger-bin-"), "harbinger")
            subprocess.run(["go", "build", "-o", out, "./cmd/harbinger"], cwd=ROOT, check=True)
            _built = out
    return _built


class Broker:
    """One `harbinger serve`; start() again after stop() restarts it on the same port."""

    def __init__(self, *, data_dir: Optional[str] = None, extra: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.addr = "127.0.0.1:0"
        self.proc: Optional[subprocess.Popen[str]] = None
        self.log: list[str] = []

    def start(self, timeout: float = 30.0) -> str:
        args = [binary(), "serve", "-grpc-addr", self.addr, "-http-addr", "off", "-log-level", "info"]
        args += ["-data-dir", self.data_dir] if self.data_dir else ["--memory"]
        args += list(self.extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        found: list[str] = []
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                m = re.search(r'msg="harbinger: serving" grpc=(\S+)', line)
                if m and not ready.is_set():
                    found.append(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or not found:
            self.kill()
            raise RuntimeError("harbinger serve did not start:\n" + "".join(self.log[-20:]))
        self.addr = found[0]
        return self.addr

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        self.proc.wait(timeout)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
