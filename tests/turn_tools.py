"""coturn's tools as an independent TURN implementation for tests and benchmarks.

Debian's ``coturn`` package brings three programs used here:

* ``turnutils_uclient``: a TURN client that allocates relays, binds channels (or uses Send
  indications), sends numbered messages through the relay to a peer and counts the echoes;
* ``turnutils_peer``: a UDP echo server that plays the peer behind the relay;
* ``turnserver``: coturn itself, run as a reference server to check that a test or benchmark
  is right before it is pointed at the appliance.

Credentials are coturn's "TURN REST API" form, which the appliance also uses:
username ``<unix expiry>:<account>``, password base64(HMAC-SHA1(secret, username)); uclient builds
them itself from ``-W <secret>`` and ``-u <account>``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

TOOLS = ("turnserver", "turnutils_peer", "turnutils_uclient")
REALM = "peermr"
STUN_MAGIC_COOKIE = 0x2112A442


# --- installation -------------------------------------------------------------------------------


def ensure_coturn_tools(timeout: float = 900) -> None:
    """Install Debian's coturn package when its tools are missing (sudo only when not root).

    The package's own turnserver service is stopped and disabled where systemd runs, so nothing
    is left listening on 3478.
    """
    if all(shutil.which(tool) for tool in TOOLS):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    apt_env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    install = [*sudo, *apt_env, "apt-get", "install", "-y", "--no-install-recommends", "coturn"]
    result = subprocess.run(install, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        # A fresh machine may not have the package lists yet.
        subprocess.run([*sudo, *apt_env, "apt-get", "update"], capture_output=True, text=True, timeout=timeout)
        result = subprocess.run(install, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"could not install coturn ({' '.join(install)}):\n{result.stdout}\n{result.stderr}")
    if Path("/run/systemd/system").is_dir() and shutil.which("systemctl"):
        subprocess.run([*sudo, "systemctl", "disable", "--now", "coturn"], capture_output=True, text=True, timeout=120)
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        raise RuntimeError(f"coturn is installed but {', '.join(missing)} not found on PATH")


# --- ports --------------------------------------------------------------------------------------


def free_udp_tcp_port(host: str = "127.0.0.1") -> int:
    """A port free for both UDP and TCP on ``host`` (a TURN server listens on both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind((host, 0))
            port = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind((host, port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free for both UDP and TCP")


def free_port_range(count: int = 200, host: str = "127.0.0.1") -> tuple[int, int]:
    """``(low, high)``: ``count`` consecutive ports free for UDP and TCP, below the ephemeral range.

    Relay ports outside the kernel's ephemeral range cannot collide with the client sockets the
    tests open; the random start keeps parallel runs apart.
    """
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    lowest, highest = 10000, max(10000 + count, ephemeral_low - count)
    for _ in range(50):
        low = random.randrange(lowest, highest)
        if all(_port_free(host, port) for port in range(low, low + count)):
            return low, low + count - 1
    raise RuntimeError(f"no {count} consecutive free ports found")


def _port_free(host: str, port: int) -> bool:
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


# --- STUN probe ---------------------------------------------------------------------------------


def stun_binding(host: str, port: int, transport: str = "udp", timeout: float = 1.0) -> tuple[str, int]:
    """Send a STUN Binding request and return the XOR-MAPPED-ADDRESS of the success response.

    Raises OSError (including TimeoutError) when nothing or something else answers.
    """
    transaction = os.urandom(12)
    request = struct.pack("!HHI", 0x0001, 0, STUN_MAGIC_COOKIE) + transaction
    if transport == "udp":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(request, (host, port))
            deadline = time.monotonic() + timeout
            while True:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                response, _ = s.recvfrom(2048)
                if response[8:20] == transaction:
                    break
    elif transport == "tcp":
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(request)
            response = _recv_exactly(s, 20)
            response += _recv_exactly(s, struct.unpack("!H", response[2:4])[0])
    else:
        raise ValueError(f"unknown transport {transport!r}")
    kind, length, cookie = struct.unpack("!HHI", response[:8])
    if kind != 0x0101 or cookie != STUN_MAGIC_COOKIE or response[8:20] != transaction:
        raise ConnectionError(f"not a STUN Binding success response: {response[:20].hex()}")
    offset = 20
    while offset + 4 <= 20 + length:
        attr, size = struct.unpack("!HH", response[offset : offset + 4])
        value = response[offset + 4 : offset + 4 + size]
        if attr == 0x0020 and len(value) >= 8 and value[1] == 0x01:  # XOR-MAPPED-ADDRESS, IPv4
            mapped_port = struct.unpack("!H", value[2:4])[0] ^ (STUN_MAGIC_COOKIE >> 16)
            address = struct.unpack("!I", value[4:8])[0] ^ STUN_MAGIC_COOKIE
            return socket.inet_ntoa(struct.pack("!I", address)), mapped_port
        offset += 4 + size + (-size % 4)
    raise ConnectionError("STUN Binding success response without an IPv4 XOR-MAPPED-ADDRESS")


def _recv_exactly(s: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed before a whole STUN message arrived")
        data += chunk
    return data


def wait_for_stun(host: str, port: int, transports: Sequence[str] = ("udp", "tcp"), timeout: float = 30) -> None:
    """Wait until ``host:port`` answers a STUN Binding request on every transport."""
    deadline = time.monotonic() + timeout
    for transport in transports:
        while True:
            try:
                stun_binding(host, port, transport, timeout=0.5)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no STUN Binding answer over {transport} from {host}:{port}: {error}") from None
                time.sleep(0.1)


# --- processes ----------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


class TurnPeer:
    """``turnutils_peer``: a UDP echo server on 127.0.0.1, the peer behind the relay."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None):
        self.host = host
        self.port = port
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10) -> TurnPeer:
        ensure_coturn_tools()
        for _ in range(5):
            port = self.port or free_udp_tcp_port(self.host)
            self.proc = subprocess.Popen(
                ["turnutils_peer", "-L", self.host, "-p", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._echoes(port, timeout):
                self.port = port
                return self
            _stop(self.proc)
            if self.port:
                break
        raise RuntimeError(f"turnutils_peer did not echo on {self.host}:{self.port or 'a free port'}")

    def _echoes(self, port: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.2)
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    return False
                probe = os.urandom(8)
                s.sendto(probe, (self.host, port))
                with contextlib.suppress(OSError):
                    if s.recv(64) == probe:
                        return True
        return False

    def stop(self) -> None:
        _stop(self.proc)

    def __enter__(self) -> TurnPeer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class CoturnServer:
    """coturn's ``turnserver`` as a reference TURN server on 127.0.0.1.

    No configuration file: TURN REST API credentials with ``secret`` in realm ``peermr``, UDP and
    TCP on one free port, relay ports ``relay_ports`` (default: a free range), loopback peers
    allowed, no CLI, no TLS/DTLS, its log in a temporary directory.
    """

    def __init__(
        self,
        secret: str,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        relay_ports: tuple[int, int] | None = None,
        realm: str = REALM,
        extra_args: Sequence[str] = (),
    ):
        self.secret = secret
        self.host = host
        self.port = port or free_udp_tcp_port(host)
        self.min_port, self.max_port = relay_ports or free_port_range(200, host)
        self.realm = realm
        self.extra_args = list(extra_args)
        self.dir = Path(tempfile.mkdtemp(prefix="coturn-"))
        self.log_path = self.dir / "turnserver.log"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [
            "turnserver",
            "-n",  # no configuration file
            f"--listening-ip={self.host}",
            f"--relay-ip={self.host}",
            f"--listening-port={self.port}",
            f"--min-port={self.min_port}",
            f"--max-port={self.max_port}",
            "--use-auth-secret",
            f"--static-auth-secret={self.secret}",
            f"--realm={self.realm}",
            "--allow-loopback-peers",
            "--no-cli",
            "--no-tls",
            "--no-dtls",
            "--no-rfc5780",
            f"--userdb={self.dir / 'turndb'}",
            f"--pidfile={self.dir / 'turnserver.pid'}",
            f"--log-file={self.log_path}",
            "--simple-log",
            "--no-stdout-log",
            *self.extra_args,
        ]

    def start(self, timeout: float = 30) -> CoturnServer:
        ensure_coturn_tools()
        with open(self.dir / "turnserver.out", "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"turnserver exited with {self.proc.returncode}:\n{self.log()}")
            try:
                wait_for_stun(self.host, self.port, timeout=0.5)
                return self
            except TimeoutError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"turnserver did not answer STUN after {timeout}s:\n{self.log()}") from None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        parts = [p.read_text(errors="replace") for p in (self.dir / "turnserver.out", self.log_path) if p.exists()]
        return "\n".join(parts)

    def stop(self) -> None:
        _stop(self.proc)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> CoturnServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


# --- turnutils_uclient --------------------------------------------------------------------------

_PROGRESS = re.compile(r"^\s*(\d+):.*start_mclient: msz=(\d+), tot_send_msgs=(\d+), tot_recv_msgs=(\d+)")
_TOTALS = re.compile(r"start_mclient: tot_send_msgs=(\d+), tot_recv_msgs=(\d+)")
_BYTES = re.compile(r"start_mclient: tot_send_bytes ~ (\d+), tot_recv_bytes ~ (\d+)")
_TRANSMIT = re.compile(r"Total transmit time is (\d+)")
_CONNECT = re.compile(r"Total connect time is (\d+)")
_LOST = re.compile(r"Total lost packets (\d+) \(([-\d.naif]+)%\), total send dropped (\d+)", re.IGNORECASE)
_RTT = re.compile(r"Average round trip delay ([-\d.naif]+) ms", re.IGNORECASE)
_JITTER = re.compile(r"Average jitter ([-\d.naif]+) ms", re.IGNORECASE)
_ERROR = re.compile(r"error|cannot|wrong|fail", re.IGNORECASE)


@dataclasses.dataclass
class Progress:
    """One per-second progress line of uclient: cumulative counts at ``second`` since it started."""

    second: int
    sessions: int
    sent: int
    received: int


@dataclasses.dataclass
class UclientResult:
    """What one ``turnutils_uclient`` run did, parsed from its output."""

    command: list[str]
    exit_code: int | None  # None: killed at the timeout
    timed_out: bool
    wall_seconds: float
    output: str
    expected: int  # messages it should send: sessions x messages per session
    sent: int | None = None
    received: int | None = None
    lost: int | None = None
    lost_percent: float | None = None
    send_dropped: int | None = None
    sent_bytes: int | None = None
    received_bytes: int | None = None
    transmit_seconds: int | None = None  # uclient's own figure, whole seconds
    connect_seconds: int | None = None
    rtt_ms: float | None = None
    jitter_ms: float | None = None
    progress: list[Progress] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    @property
    def completed(self) -> bool:
        """uclient ran to its summary and exited 0."""
        return self.exit_code == 0 and not self.timed_out and self.sent is not None

    @property
    def clean(self) -> bool:
        """Every message was sent and every one came back."""
        return self.completed and self.sent == self.expected and self.received == self.sent and self.lost == 0

    @property
    def active_seconds(self) -> float | None:
        """Seconds during which messages flowed, from the per-second progress lines.

        From the last line before anything was sent to the first line that shows every echo that
        ever arrived; uclient starts each session 1-6 s after connecting and waits 10 s for echoes
        that never come, and its "transmit time" counts both. Whole seconds, at least 1.
        """
        if self.received is None or not self.progress:
            return None
        start = 0
        for sample in self.progress:
            if sample.sent > 0:
                break
            start = sample.second
        end = next((s.second for s in self.progress if s.received >= self.received), self.progress[-1].second + 1)
        return float(max(1, end - start))

    @property
    def received_per_second(self) -> float | None:
        seconds = self.active_seconds
        return None if seconds is None or self.received is None else self.received / seconds

    def describe(self) -> str:
        state = "timed out" if self.timed_out else f"exit {self.exit_code}"
        return (
            f"{' '.join(self.command)}: {state}, sent {self.sent}/{self.expected}, received {self.received}, "
            f"lost {self.lost} ({self.lost_percent}%), transmit time {self.transmit_seconds}s, "
            f"wall {self.wall_seconds:.1f}s"
        )

    def assert_clean(self) -> None:
        """AssertionError with the run's output unless every message was sent and came back."""
        assert self.clean, f"{self.describe()}\n--- uclient output ---\n{self.output[-6000:]}"


def parse_uclient_output(result: UclientResult) -> UclientResult:
    """Fill ``result``'s figures from ``result.output``."""
    for line in result.output.splitlines():
        if m := _PROGRESS.search(line):
            result.progress.append(Progress(*(int(g) for g in m.groups())))
        elif m := _TOTALS.search(line):
            result.sent, result.received = int(m[1]), int(m[2])
        elif m := _BYTES.search(line):
            result.sent_bytes, result.received_bytes = int(m[1]), int(m[2])
        elif m := _TRANSMIT.search(line):
            result.transmit_seconds = int(m[1])
        elif m := _CONNECT.search(line):
            result.connect_seconds = int(m[1])
        elif m := _LOST.search(line):
            result.lost, result.lost_percent, result.send_dropped = int(m[1]), _float(m[2]), int(m[3])
        elif m := _RTT.search(line):
            result.rtt_ms = _float(m[1])
        elif m := _JITTER.search(line):
            result.jitter_ms = _float(m[1])
        elif _ERROR.search(line):
            result.errors.append(line.strip())
    if result.lost is None and result.sent is not None and result.received is not None:
        result.lost = max(0, result.sent - result.received)
    return result


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def uclient_command(
    host: str,
    port: int,
    *,
    secret: str,
    user: str = "turn-test",
    peer_host: str = "127.0.0.1",
    peer_port: int = 3480,
    tcp: bool = False,
    send_indications: bool = False,
    clients: int = 2,
    messages: int = 100,
    length: int = 200,
    interval_ms: int | None = None,
    negative: bool = False,
    negative_protocol: bool = False,
    rtcp: bool = True,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ``turnutils_uclient`` command line; see :func:`run_uclient`."""
    command = ["turnutils_uclient"]
    if tcp:
        command.append("-t")
    if send_indications:
        command.append("-s")
    if negative:
        command.append("-N")
    if negative_protocol:
        command.append("-R")
    if not rtcp:
        command.append("-c")
    command += ["-m", str(clients), "-n", str(messages), "-l", str(length)]
    if interval_ms is not None:
        command += ["-z", str(interval_ms)]
    command += ["-e", peer_host, "-r", str(peer_port), "-u", user, "-W", secret, "-p", str(port), *extra_args, host]
    return command


def run_uclient(
    host: str,
    port: int,
    *,
    secret: str,
    user: str = "turn-test",
    peer_host: str = "127.0.0.1",
    peer_port: int = 3480,
    tcp: bool = False,
    send_indications: bool = False,
    clients: int = 2,
    messages: int = 100,
    length: int = 200,
    interval_ms: int | None = None,
    negative: bool = False,
    negative_protocol: bool = False,
    rtcp: bool = True,
    extra_args: Sequence[str] = (),
    timeout: float = 120,
) -> UclientResult:
    """Run ``turnutils_uclient`` against the TURN server at ``host:port`` and parse what it printed.

    ``clients`` sessions (``-m``) each allocate a relay over UDP (default) or TCP (``tcp``, ``-t``), bind a channel to
    the peer (or use Send indications, ``send_indications``, ``-s``), send ``messages`` (``-n``)
    messages of ``length`` bytes (``-l``) every ``interval_ms`` (``-z``; uclient's default is 20 ms,
    0 sends as fast as it can) and count the echoes. ``negative`` (``-N``) binds random channel
    numbers; ``negative_protocol`` (``-R``) corrupts about one message in ten, requests included.
    By default uclient pairs the sessions as RTP and RTCP (rounding ``clients`` up to even): the
    RTP allocation asks for an even port and reserves the next one (EVEN-PORT with the R bit), the
    RTCP allocation takes it with RESERVATION-TOKEN; ``rtcp=False`` (``-c``) makes independent
    sessions. uclient binds channel numbers from 0x4000-0x7FFF (RFC 5766's range).
    The credentials are built from ``secret`` (``-W``) and the account ``user`` (``-u``).

    Never raises on a failed run: a run still going after ``timeout`` seconds is killed and
    reported with ``timed_out``; check ``clean`` or call ``assert_clean()``.
    """
    ensure_coturn_tools()
    command = uclient_command(
        host,
        port,
        secret=secret,
        user=user,
        peer_host=peer_host,
        peer_port=peer_port,
        tcp=tcp,
        send_indications=send_indications,
        clients=clients,
        messages=messages,
        length=length,
        interval_ms=interval_ms,
        negative=negative,
        negative_protocol=negative_protocol,
        rtcp=rtcp,
        extra_args=extra_args,
    )
    sessions = clients + clients % 2 if rtcp and "-c" not in extra_args else clients
    started = time.monotonic()
    try:
        completed = subprocess.run(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
        )
        exit_code, timed_out, output = completed.returncode, False, completed.stdout
    except subprocess.TimeoutExpired as expired:
        exit_code, timed_out, output = None, True, expired.stdout or b""
    result = UclientResult(
        command=command,
        exit_code=exit_code,
        timed_out=timed_out,
        wall_seconds=time.monotonic() - started,
        output=output.decode(errors="replace") if isinstance(output, bytes) else output,
        expected=sessions * messages,
    )
    return parse_uclient_output(result)
