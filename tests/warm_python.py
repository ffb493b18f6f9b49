"""A Python process that imports Quadrat's heavy modules (torch, open_clip, SQLAlchemy, the
engine) once, then forks a fresh child process for each command a test runs.

Tests of what happens *between processes* (two first runs at once, a full disk, a kill) need a
real process per command, but each new interpreter spends seconds of CPU importing torch. A
child forked from this warm parent is still a process of its own (its own pid, exit status,
file descriptors, locks and environment) and starts at once. The parent only imports: it opens
no library and runs no torch operation, so no thread or lock is alive when it forks.
`WarmPython.launcher` writes an executable that does the same for a command a script runs by
path (the stand-in bundle of tests/test_packaging.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# What a command line of the tests loads anyway: importing it here is what saves the time.
PRELOAD = (
    "torch",
    "open_clip",
    "sqlalchemy",
    "alembic.command",
    "engine.catalog.db",
    "engine.catalog.library",
    "engine.indexing.indexer",
    "engine.models.encoders",
    "app.cli",
)


# -- the warm parent (runs in its own process: python tests/warm_python.py SOCKET) -----------


def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: become the requested command (`-c CODE ARGS` or `-m MODULE ARGS`)."""
    import importlib
    import random
    import runpy

    import numpy
    import torch

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)  # as a new interpreter would see PYTHONPATH
    importlib.invalidate_caches()
    threads = request["env"].get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))  # read at import by a new interpreter
    # A new interpreter seeds its generators afresh: forked children must not share a sequence.
    random.seed()
    numpy.random.seed()
    torch.seed()
    argv = request["argv"]
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        elif argv[0] == "-m":
            sys.argv = argv[1:]
            # `python -m` runs the module's code as __main__ without importing it first.
            sys.modules.pop(argv[1], None)
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:  # a script file
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    return 0


def _join_network(netns: int) -> None:
    """Enter the network namespace `netns` (an open /proc/PID/ns/net) and close it."""
    import ctypes

    clone_newnet = 0x40000000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(netns, clone_newnet) != 0:
        raise OSError(ctypes.get_errno(), "cannot enter the caller's network namespace")
    os.close(netns)


def _fork(conn: socket.socket, listener: socket.socket) -> int:
    """Receive one request with its stdin/stdout/stderr (and, from a launcher, its network
    namespace) and fork the child that runs it."""
    message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 4)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            listener.close()
            conn.close()
            if request.get("netns"):
                *fds, netns = fds
                _join_network(netns)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            code = _run_child(request)
        except BaseException:  # noqa: BLE001 - a child reports any failure as Python would
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def serve(path: str) -> None:
    """Import everything, then fork one child per connection and report its exit status."""
    import importlib
    import threading

    for name in PRELOAD:
        # A module that cannot be imported fails again in the child, as in a new interpreter.
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    assert threading.active_count() == 1, "a preloaded module started a thread"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection that asked for it
    incoming = selectors.DefaultSelector()
    incoming.register(listener, selectors.EVENT_READ)
    while True:
        # Poll for exits while children run; otherwise sleep until the next request.
        if incoming.select(timeout=0.01 if waiting else None):
            conn, _ = listener.accept()
            waiting[_fork(conn, listener)] = conn
        for pid in list(waiting):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                conn = waiting.pop(pid)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                conn.close()


# -- the test side ------------------------------------------------------------------------------


class WarmProcess:
    """A command forked by the warm parent, used like `subprocess.Popen` with pipes."""

    def __init__(self, conn: socket.socket, out: Any, err: Any) -> None:
        self._conn = conn
        self._buffer = b""
        self._out, self._err = out, err
        first = self._line(timeout=60)
        assert first is not None, "the warm parent did not answer"
        self.pid: int = first["pid"]
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> dict[str, Any] | None:
        """The parent's next message, or None when none came within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._conn], [], [], left)
            if not readable:
                return None
            chunk = self._conn.recv(4096)
            assert chunk, "the warm parent went away"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def _wait_for_status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            message = self._line(timeout)
            if message is not None:
                self.returncode = os.waitstatus_to_exitcode(message["status"])
                self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._wait_for_status(timeout=0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait_for_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(["warm python"], timeout or 0)
        return code

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the exit, then return what the command wrote to stdout and stderr."""
        self.wait(timeout)
        outputs = []
        for file in (self._out, self._err):
            file.seek(0)
            outputs.append(file.read().decode(errors="replace"))
            file.close()
        return outputs[0], outputs[1]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


class WarmPython:
    """The warm parent, started once; `popen`/`run` fork a command from it."""

    def __init__(self) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="qwarm"))  # short: a socket's path
        self.socket_path = str(self._folder / "s")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self._server = subprocess.Popen(
            [sys.executable, __file__, self.socket_path],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._server.stdout is not None
        assert self._server.stdout.readline().strip() == "ready", "the warm parent failed"

    def popen(self, argv: list[str], *, env: dict[str, str], cwd: str | Path) -> WarmProcess:
        """Fork `python ARGV` (`-c CODE ...`, `-m MODULE ...` or `SCRIPT ...`) in `cwd` with
        exactly `env`."""
        # Files, not pipes: nothing can block on a full pipe; WarmProcess closes them.
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.socket_path)
        request = {"argv": argv, "env": env, "cwd": str(cwd)}
        with open(os.devnull, "rb") as stdin:
            socket.send_fds(
                conn, [json.dumps(request).encode()], [stdin.fileno(), out.fileno(), err.fileno()]
            )
        return WarmProcess(conn, out, err)

    def run(
        self, argv: list[str], *, env: dict[str, str], cwd: str | Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Like `subprocess.run(capture_output=True, text=True)` for `python ARGV`."""
        process = self.popen(argv, env=env, cwd=cwd)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            if process.returncode is None:
                process.kill()
        assert process.returncode is not None
        return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)

    def launcher(self, path: Path, *prefix: str) -> Path:
        """Write an executable at `path` that runs `python PREFIX ARGS` as a child of the warm
        parent, in the caller's environment, folder, standard streams and network namespace
        (so `unshare -n` still cuts the network), and exits as that child exits."""
        path.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
            f"from tests.warm_python import forward\n"
            f"forward({self.socket_path!r}, {list(prefix)!r})\n"
        )
        path.chmod(0o755)
        return path

    def stop(self) -> None:
        """Stop the warm parent (the process this object started, and only it)."""
        self._server.kill()
        self._server.wait(timeout=30)
        assert self._server.stdout is not None
        self._server.stdout.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
            self._folder.rmdir()


def forward(socket_path: str, prefix: list[str]) -> None:
    """In a launcher (see `WarmPython.launcher`): have the warm parent run `python PREFIX ARGS`
    here, wait, and end this process as the child ended (its exit code, or its signal)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(socket_path)
    request = {
        "argv": [*prefix, *sys.argv[1:]],
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "netns": True,
    }
    netns = os.open("/proc/self/ns/net", os.O_RDONLY)
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2, netns])
    os.close(netns)
    code = WarmProcess(conn, None, None).wait()
    if code < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
