"""`python -m appliance ...` for the tests, forked from a process that has imported the appliance once.

Each appliance the tests start and each CLI command they run used to import the whole appliance
again (1-2 s of CPU each, several minutes over the suite). The fork server imports it once; every
command is then a fork of it that runs ``python -m appliance`` as the interpreter would (runpy,
its arguments, environment, working directory and standard streams), in a process of its own that
the test signals and waits for like a subprocess.Popen.

Run as ``python -m tests.forkserver SOCKET``: it serves on the Unix socket SOCKET until its parent
exits.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What `peermr serve` and the commands import: the part of their start the fork server does once.
PRELOAD = ("appliance.cli", "appliance.app", "appliance.server", "uvicorn")

# Set by the tests (tests/conftest.py): tests/support.py then starts appliances and runs commands
# here. The benches keep `python -m appliance`, whose start, CPU and memory they measure.
enabled = False
MAX_MESSAGE = 1 << 20


# ------------------------------------------------------------------ the test's side


class ForkedProcess:
    """A command forked by the server: a subprocess.Popen for what the tests use of one."""

    def __init__(self, args: list[str], connection: socket.socket):
        self.args, self.connection = args, connection
        self.pid: int = json.loads(_receive(connection))["pid"]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.connection], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.connection], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        self.returncode = json.loads(_receive(self.connection))["returncode"]
        self.connection.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass  # exited, not yet reported

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The fork server, started at the first command and stopped when the tests end."""

    _running: ForkServer | None = None

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="peermr-forkserver-")
        self.path = str(Path(self.directory) / "socket")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver", self.path], stdout=subprocess.PIPE)
        ready = self.proc.stdout.readline()
        if ready != b"ready\n":
            raise RuntimeError(f"the fork server did not start: {ready!r}")
        atexit.register(self.stop)

    @classmethod
    def running(cls) -> ForkServer:
        if cls._running is None or cls._running.proc.poll() is not None:
            cls._running = ForkServer()
        return cls._running

    def spawn(self, args: list[str], env: dict[str, str], stdin: int, stdout: int, stderr: int) -> ForkedProcess:
        """``python -m appliance *args`` with ``env``, in the current directory, on those descriptors."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(self.path)
        request = json.dumps({"args": args, "env": env, "cwd": os.getcwd()}).encode()
        socket.send_fds(connection, [request], [stdin, stdout, stderr])
        return ForkedProcess([sys.executable, "-m", "appliance", *args], connection)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        Path(self.path).unlink(missing_ok=True)
        os.rmdir(self.directory)


def popen(args: list[str], env: dict[str, str], stdout: int, stderr: int, stdin: int = 0) -> ForkedProcess:
    """``python -m appliance *args`` as subprocess.Popen would start it, forked from the server."""
    return ForkServer.running().spawn(args, env, stdin, stdout, stderr)


def run(args: list[str], env: dict[str, str], input: str | None, timeout: float) -> subprocess.CompletedProcess:
    """``python -m appliance *args`` as subprocess.run(capture_output=True, text=True) runs it."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    theirs = [out_write, err_write]  # closed here once the command has them
    stdin, in_write = 0, None  # our standard input, as subprocess.run passes it without input
    if input is not None:
        stdin, in_write = os.pipe()
        theirs.append(stdin)
    try:
        proc = popen(args, env, out_write, err_write, stdin)
    finally:
        for fd in theirs:
            os.close(fd)
    if in_write is not None:
        threading.Thread(target=_write_all, args=(in_write, input.encode()), daemon=True).start()
    readers = [_Reader(out_read), _Reader(err_read)]
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    stdout, stderr = (reader.text() for reader in readers)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


class _Reader(threading.Thread):
    """Reads a pipe to its end, as subprocess.run does while it waits."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.pipe, self.data = open(fd, "rb"), b""
        self.start()

    def run(self) -> None:
        with self.pipe:
            self.data = self.pipe.read()

    def text(self) -> str:
        self.join()
        return self.data.decode().replace("\r\n", "\n")


def _write_all(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb") as pipe:
            pipe.write(data)
    except BrokenPipeError:
        pass  # the command did not read it all, as with subprocess.run


def _receive(connection: socket.socket) -> bytes:
    message = connection.recv(MAX_MESSAGE)
    if not message:
        raise RuntimeError("the fork server closed the connection")
    return message


# ------------------------------------------------------------------ the server's side


def serve(path: str) -> None:
    environ_before = dict(os.environ)
    for module in PRELOAD:
        __import__(module)
    # Imports may set defaults in the environment (appliance/db.py sets PICCOLO_CONF): a command's
    # own environment gets them as its import would have set them.
    import_defaults = {k: v for k, v in os.environ.items() if k not in environ_before}
    assert threading.active_count() == 1, "the preloaded modules started threads: forking them is unsafe"
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    children: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while os.getppid() == parent:
        if select.select([listener], [], [], 0.05)[0]:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, MAX_MESSAGE, 3)
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                connection.close()
                _child(request, fds, import_defaults)
            for fd in fds:
                os.close(fd)
            connection.send(json.dumps({"pid": pid}).encode())
            children[pid] = connection
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid)
            try:
                connection.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass  # the test side went away
            connection.close()


def _child(request: dict, fds: list[int], import_defaults: dict[str, str]) -> None:
    """Become ``python -m appliance ...``; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({**import_defaults, **request["env"]})
        sys.argv = [sys.argv[0], *request["args"]]  # runpy sets argv[0] as -m does
        try:
            runpy.run_module("appliance", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            code = _exit_code(exit.code)
        except BaseException:
            sys.excepthook(*sys.exc_info())
        # What the interpreter does at its end: wait for threads, run atexit functions, flush.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(sys.argv[1])
