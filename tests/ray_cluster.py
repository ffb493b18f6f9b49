"""A real Ray cluster on 127.0.0.1 for the Ray indexer's tests and benchmark: one-CPU nodes
started with `ray start`, stopped by killing exactly the processes they started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes_under(marker: str) -> set[int]:
    """Pids of the processes whose command line names `marker`, and all their descendants."""
    parents: dict[int, int] = {}
    roots: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="ignore")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        if marker in cmdline:
            roots.add(pid)
    found = roots - {os.getpid()}  # this process may name the marker too
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return found


def pids_named(text: str) -> list[int]:
    """Pids whose command line (a Ray worker's is its task or actor name) contains `text`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="ignore")
            except OSError:
                continue
            if text in cmdline:
                pids.append(int(entry.name))
    return pids


class LocalRayCluster:
    """A Ray cluster of one-CPU nodes on 127.0.0.1, started with `ray start` and stopped by
    killing exactly the processes it started (never every Ray process of the machine)."""

    def __init__(self) -> None:
        self.temp_dir = Path(tempfile.mkdtemp(prefix="qray"))  # short: Ray's socket paths
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes = 0
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"

    def _ray_start(self, *args: str) -> None:
        command = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            *args,
            "--num-cpus",
            "1",
            "--node-ip-address",
            "127.0.0.1",
            "--object-store-memory",
            str(100 * 1024 * 1024),
            "--disable-usage-stats",
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--metrics-export-port",
            str(free_port()),
            "--runtime-env-agent-port",
            str(free_port()),
        ]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        self.nodes += 1

    def start_head(self) -> None:
        self._ray_start(
            "--head",
            "--port",
            str(self.port),
            "--include-dashboard=false",
            "--temp-dir",
            str(self.temp_dir),
        )

    def add_node(self) -> None:
        self._ray_start("--address", self.address, "--temp-dir", str(self.temp_dir))
        deadline = time.monotonic() + 60
        while self.alive_nodes() < self.nodes:
            assert time.monotonic() < deadline, "the second Ray node did not join"
            time.sleep(0.5)

    def alive_nodes(self) -> int:
        import ray

        ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
        try:
            return sum(1 for node in ray.nodes() if node["Alive"])
        finally:
            ray.shutdown()

    def stop(self) -> None:
        # SIGKILL at once: Ray's processes spend seconds shutting down after a SIGTERM, and a
        # test cluster keeps nothing worth a clean shutdown (its whole folder is removed next).
        pids = processes_under(str(self.temp_dir))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.05)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
