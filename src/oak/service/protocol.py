"""How ``oak submit`` / ``status`` / ``cancel`` talk to ``oak serve``.

Default transport: a Unix socket ``RUN_DIR/oak.sock`` (mode 0600: only the run directory's owner can connect);
one JSON object per line each way: ``{"op": "status" | "submit" | "cancel" | "metrics", ...}`` →
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.

Optional transport (``oak serve --listen 127.0.0.1:PORT``): HTTP on that address, every request authenticated
with the token in ``RUN_DIR/token`` (0600) as ``Authorization: Bearer TOKEN``: ``GET /metrics`` (Prometheus
text format) and ``POST /v1/request`` (the same JSON objects as the socket). ``GET /`` is the status page
(:mod:`oak.service.page`): a browser signs in once — the sign-in form (``POST /login``) or ``/?token=TOKEN``,
answered with a redirect to ``/`` that takes the token out of the address — and holds a cookie (HttpOnly,
SameSite=Strict, Secure under TLS) that opens the page only: it is an HMAC of the token, not the token, and the
API still takes the bearer header alone. There is no unauthenticated network listener. The token is kept across restarts (scrapers keep working) or read from a file of the user's
(``--token-file``). Plain HTTP listens on loopback only: an address reachable from other machines needs TLS
(``--tls-cert``/``--tls-key``) or an explicit ``--insecure-http`` — the token is a shell as the service's user.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import socketserver
import ssl
import sys
import threading
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from oak.errors import OakInputError
from oak.io_util import write_atomic
from oak.service.page import LOGIN_PAGE

SOCKET_NAME = "oak.sock"
TOKEN_NAME = "token"
LOCK_NAME = "serve.lock"
MAX_REQUEST_BYTES = 4 * 1024 * 1024
CLIENT_TIMEOUT_S = 330.0
"""A client waits this long for a reply (the service waits up to 300 s for its scheduler thread)."""
_SUN_PATH_MAX = 107

Handler = Callable[[str, dict[str, Any]], dict[str, Any]]


class NoServer(OakInputError):
    """No ``oak serve`` answers on the run directory."""


def socket_path(run_dir: Path) -> Path:
    return Path(run_dir) / SOCKET_NAME


def _bind_name(path: Path) -> tuple[str, int | None]:
    """A name ``bind``/``connect`` accept for ``path``: itself, or — past the 107-byte limit of a Unix socket
    path — the same file reached through ``/proc/self/fd`` of its opened directory (the fd, to close after)."""
    text = str(path)
    if len(text.encode()) <= _SUN_PATH_MAX:
        return text, None
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{path.name}", fd


#: The deepest nesting of arrays and objects a request may have: a real request is 3 deep; JSON nested 100,000
#: deep made the decoder raise RecursionError in the server's thread and the client got no reply.
MAX_REQUEST_DEPTH = 64


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON ``text``, ignoring brackets inside strings (linear, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _handle(handler: Handler, text: str) -> dict[str, Any]:
    if text.count("[") + text.count("{") > MAX_REQUEST_DEPTH and _depth(text) > MAX_REQUEST_DEPTH:
        return {"ok": False, "error": f"request nested deeper than {MAX_REQUEST_DEPTH} levels"}
    try:
        req = json.loads(text)
    except ValueError as exc:
        return {"ok": False, "error": f"not a JSON request ({exc})"}
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        return {"ok": False, "error": 'expected a JSON object with "op"'}
    op = req.pop("op")
    return handler(op, req)


#: A Unix-socket connection that sends nothing for this long is closed; at most MAX_CONNECTIONS are served at once
#: (one more is told so and closed): 300 idle connections held 305 threads for good ([hardening] row 8).
SOCKET_IDLE_S = 10.0
MAX_CONNECTIONS = 64


class _UnixHandler(socketserver.StreamRequestHandler):
    server: _UnixServer
    timeout = SOCKET_IDLE_S

    def handle(self) -> None:
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
        except OSError:  # idle past SOCKET_IDLE_S (TimeoutError), or the client went away
            return
        if len(line) > MAX_REQUEST_BYTES:
            reply: dict[str, Any] = {"ok": False, "error": f"request larger than {MAX_REQUEST_BYTES} bytes"}
        else:
            reply = _handle(self.server.handler, line.decode("utf-8", errors="replace"))
        with contextlib.suppress(OSError):  # a client that stopped reading, or went away
            self.wfile.write((json.dumps(reply) + "\n").encode())


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, name: str, handler: Handler) -> None:
        self.handler = handler
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        old = os.umask(0o177)  # created 0600: nobody else can connect
        try:
            super().__init__(name, _UnixHandler)
        finally:
            os.umask(old)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                msg = {"ok": False, "error": f"oak serve is busy: {MAX_CONNECTIONS} connections open; try again"}
                request.sendall((json.dumps(msg) + "\n").encode())
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


HTTP_TIMEOUT_S = 10.0
"""A connection of the HTTP listener that sends nothing for this long is closed (no slow-client pile-up)."""
HTTP_DEADLINE_S = 60.0
"""A connection of the HTTP listener is closed this long after it opened, whatever it sends: a client that
trickles a header line every few seconds would otherwise keep its thread and descriptor for good."""


class _HttpServer(ThreadingHTTPServer):
    """The HTTP listener: at most MAX_CONNECTIONS connections at once (one more gets 503 and is closed), each
    closed HTTP_DEADLINE_S after it opened; IPv6 where the host is an IPv6 address; a failed TLS handshake or a
    client gone mid-reply is one line on stderr, not a traceback."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):  # plain bytes: a TLS connection has not shaken hands yet
                if not isinstance(request, ssl.SSLSocket):
                    request.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        deadline = threading.Timer(HTTP_DEADLINE_S, _cut, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ssl.SSLError | ConnectionError | TimeoutError):  # routine on a network port
            print(f"oak serve: HTTP connection from {client_address[0]}: {exc}", file=sys.stderr, flush=True)
            return
        super().handle_error(request, client_address)


def _cut(request: socket.socket) -> None:
    """End a connection past its deadline: its thread's blocked read returns and the handler ends."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(request, socket.SHUT_RDWR)


#: the status page's cookie: an HMAC of the token (it opens the page, never the API: a stolen cookie is no token)
PAGE_COOKIE = "oak_page"


def page_cookie_value(token: str) -> str:
    return hmac.new(token.encode(), b"oak status page v1", "sha256").hexdigest()


def _http_handler(handler: Handler, token: str, secure: bool = False) -> type[BaseHTTPRequestHandler]:
    expected = token.encode()
    cookie_value = page_cookie_value(token).encode()

    class H(BaseHTTPRequestHandler):
        timeout = HTTP_TIMEOUT_S

        def setup(self) -> None:
            super().setup()  # the connection's timeout is set here: a client that stalls its TLS handshake
            if isinstance(self.connection, ssl.SSLSocket):  # cannot hold the listener (the handshake runs in
                self.connection.do_handshake()  # this connection's thread, not in accept)

        def _bearer_ok(self) -> bool:
            got = self.headers.get("Authorization", "").encode("utf-8", errors="replace")
            return got[:7].lower() == b"bearer " and hmac.compare_digest(got[7:].strip(), expected)  # RFC 7235

        def _authorised(self) -> bool:
            ok = self._bearer_ok()
            if not ok:
                self._send(
                    401,
                    "text/plain",
                    b"missing or wrong token (Authorization: Bearer <RUN_DIR/token>)\n",
                    {"WWW-Authenticate": 'Bearer realm="oak serve"'},  # RFC 6750
                )
            return ok

        def _cookie_ok(self) -> bool:
            jar = SimpleCookie()
            with contextlib.suppress(CookieError):
                jar.load(self.headers.get("Cookie", ""))
            morsel = jar.get(PAGE_COOKIE)
            return morsel is not None and hmac.compare_digest(morsel.value.encode(), cookie_value)

        def _send(self, code: int, kind: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _signed_in(self) -> None:
            """303 to the page with its cookie set: the token leaves the address bar and the history."""
            flags = "; Secure" if secure else ""
            self._send(
                303,
                "text/plain",
                b"signed in\n",
                {
                    "Location": "/",
                    "Set-Cookie": f"{PAGE_COOKIE}={cookie_value.decode()}; HttpOnly; SameSite=Strict; Path=/{flags}",
                },
            )

        def _login(self, note: str = "") -> None:
            page = LOGIN_PAGE.replace("</h1>", f"</h1><p class=err>{note}</p>" if note else "</h1>")
            self._send(401, "text/html; charset=utf-8", page.encode())

        def _page(self, query: dict[str, list[str]]) -> None:
            given = query.get("token")
            if given is not None:
                if hmac.compare_digest(given[0].encode("utf-8", errors="replace"), expected):
                    self._signed_in()
                else:
                    self._login("wrong token")
                return
            if not (self._bearer_ok() or self._cookie_ok()):
                self._login()
                return
            refresh = query.get("refresh", [""])[0]  # ASCII digits only: "²".isdigit(), and 5,000 digits int() refuses
            given_refresh = re.fullmatch(r"[0-9]{1,6}", refresh) is not None
            reply = handler("page", {"refresh": int(refresh)} if given_refresh else {})
            self._send(
                200 if reply.get("ok") else 500,
                "text/html; charset=utf-8",
                str(reply.get("html", reply.get("error", ""))).encode(),
                {"Cache-Control": "no-store"},
            )

        def do_GET(self) -> None:
            path, _, q = self.path.partition("?")
            if path == "/":
                self._page(parse_qs(q))
                return
            if not self._authorised():
                return
            if path != "/metrics":
                self._send(404, "text/plain", b"GET / (the status page), GET /metrics or POST /v1/request\n")
                return
            reply = handler("metrics", {})
            self._send(200, "text/plain; version=0.0.4", str(reply.get("text", "")).encode())

        def do_POST(self) -> None:
            if self.path == "/login":  # the status page's sign-in form
                try:
                    n = min(int(self.headers.get("Content-Length") or 0), 4096)
                except ValueError:
                    n = 0
                form = parse_qs(self.rfile.read(max(n, 0)).decode("utf-8", errors="replace"))
                given = form.get("token", [""])[0].strip()
                if given and hmac.compare_digest(given.encode("utf-8", errors="replace"), expected):
                    self._signed_in()
                else:
                    self._login("wrong token")
                return
            if not self._authorised():
                return
            if self.path != "/v1/request":
                self._send(404, "text/plain", b"POST /v1/request\n")
                return
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if n < 0:
                self._send(400, "application/json", b'{"ok": false, "error": "bad Content-Length"}')
                return
            if n > MAX_REQUEST_BYTES:
                self._send(413, "application/json", b'{"ok": false, "error": "request too large"}')
                return
            reply = _handle(handler, self.rfile.read(n).decode("utf-8", errors="replace"))
            self._send(200 if reply.get("ok") else 400, "application/json", json.dumps(reply).encode())

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the service logs rounds, not hits
            return

    return H


#: a token read from a file or kept from a previous start must be at least this long (``secrets.token_hex(24)``
#: makes 48 characters)
MIN_TOKEN_CHARS = 32


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (a name is resolved; unresolvable: False)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def read_token(path: Path, what: str) -> str:
    """A bearer token from ``path``: one line of at least MIN_TOKEN_CHARS printable characters without spaces,
    in a file only its owner may read.

    Raises:
        OakInputError: naming the file and what is wrong.
    """
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise OakInputError(f"{what} {path}: cannot read it ({exc})") from None
    if st.st_mode & 0o077:
        raise OakInputError(f"{what} {path}: readable by others (mode {st.st_mode & 0o777:o}); chmod 600 it")
    if len(text) < MIN_TOKEN_CHARS or not text.isprintable() or any(c.isspace() for c in text):
        raise OakInputError(
            f"{what} {path}: expected one line of at least {MIN_TOKEN_CHARS} characters without spaces "
            "(e.g. python3 -c 'import secrets; print(secrets.token_hex(24))')"
        )
    return text


class Listeners:
    """The service's listeners: the Unix socket, and optionally the authenticated HTTP address.

    ``tls``: (certificate chain, private key) PEM files: HTTPS instead of HTTP. ``insecure_http``: allow plain
    HTTP on an address other machines can reach. ``token_file``: the bearer token (else the one kept in
    RUN_DIR/token from an earlier start, else a new one)."""

    def __init__(
        self,
        run_dir: Path,
        handler: Handler,
        listen: tuple[str, int] | None = None,
        tls: tuple[Path, Path] | None = None,
        insecure_http: bool = False,
        token_file: Path | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self._dir_fd: int | None = None
        self._started = False
        self.http: ThreadingHTTPServer | None = None
        self.token_path: Path | None = None
        self._lock_fd: int | None = lock_run_dir(self.run_dir)
        try:
            if listen is not None:  # first: a busy port fails before anything else exists
                where = f"--listen {listen[0]}:{listen[1]}"
                if tls is None and not insecure_http and not is_loopback(listen[0]):
                    raise OakInputError(
                        f"{where}: plain HTTP there sends the bearer token — a shell as this user — in clear "
                        "text to anyone on the path; give --tls-cert FILE --tls-key FILE, listen on 127.0.0.1, "
                        "or add --insecure-http (e.g. behind a TLS proxy on a trusted network)"
                    )
                context = None
                if tls is not None:
                    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    context.minimum_version = ssl.TLSVersion.TLSv1_2
                    try:
                        context.load_cert_chain(str(tls[0]), str(tls[1]))
                    except (OSError, ssl.SSLError) as exc:
                        raise OakInputError(
                            f"--tls-cert {tls[0]} / --tls-key {tls[1]}: not a usable certificate and key ({exc})"
                        ) from None
                self.token_path = self.run_dir / TOKEN_NAME
                if token_file is not None:
                    token = read_token(token_file, "--token-file")
                else:
                    # kept across restarts: Prometheus scrapers and clients keep working; one that cannot be
                    # kept (readable by others, damaged) is refused with why, not silently replaced
                    try:
                        token = (
                            read_token(self.token_path, "token") if self.token_path.exists() else secrets.token_hex(24)
                        )
                    except OakInputError as exc:
                        raise OakInputError(f"{exc} (or delete it: oak serve then makes a new token)") from None
                try:
                    self.http = _HttpServer(listen, _http_handler(handler, token, secure=tls is not None))
                except OSError as exc:
                    raise OakInputError(f"{where}: cannot listen there ({exc.strerror or exc})") from None
                if context is not None:
                    self.http.socket = context.wrap_socket(
                        self.http.socket, server_side=True, do_handshake_on_connect=False
                    )
                write_atomic(self.token_path, token + "\n", mode=0o600)
            path = socket_path(self.run_dir)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a crashed service's socket (the lock above says no service owns it)
            name, self._dir_fd = _bind_name(path)
            self.unix = _UnixServer(name, handler)
        except BaseException:
            self._close_files()
            raise
        self._threads = [threading.Thread(target=self.unix.serve_forever, name="oak-unix", daemon=True)]
        if self.http is not None:
            self._threads.append(threading.Thread(target=self.http.serve_forever, name="oak-http", daemon=True))
        for t in self._threads:
            t.start()
        self._started = True

    @property
    def address(self) -> tuple[str, int] | None:
        if self.http is None:
            return None
        host, port = self.http.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        if self._started:
            self.unix.shutdown()
            if self.http is not None:
                self.http.shutdown()
            self._started = False
        self.unix.server_close()
        with contextlib.suppress(FileNotFoundError):
            socket_path(self.run_dir).unlink()
        self._close_files()

    def _close_files(self) -> None:
        if self.http is not None:
            self.http.server_close()
        for fd in (self._dir_fd, self._lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._dir_fd = None


_HELD = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
"""What ``flock`` fails with when another process holds the lock (any other error: the file system has none)."""


def lock_run_dir(run_dir: Path) -> int | None:
    """Take ``run_dir``'s scheduler lock (``LOCK_NAME``), which ``oak serve`` and ``oak run`` hold while they run:
    its file descriptor, to close when done. OakInputError if another process holds it; None, with a warning on
    stderr, where the file system cannot lock files (NFS without a lock daemon, Lustre without flock), so that
    a run there is not refused for a lock it cannot have."""
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _HELD:
            raise OakInputError(f"{run_dir}: another oak run or oak serve is running on this run directory") from None
        print(
            f"oak: warning: {run_dir}: its file system cannot lock files ({exc.strerror or exc}); a second "
            "scheduler started on this run directory would not be refused",
            file=sys.stderr,
            flush=True,
        )
        return None
    return fd


def call(run_dir: Path, op: str, timeout_s: float = CLIENT_TIMEOUT_S, **args: Any) -> dict[str, Any]:
    """Send one request to the ``oak serve`` of ``run_dir`` and return its reply (raises :class:`NoServer`)."""
    path = socket_path(run_dir)
    payload = (json.dumps({"op": op, **args}) + "\n").encode()
    if len(payload) > MAX_REQUEST_BYTES:  # the service would stop reading and close: say why before sending
        raise OakInputError(
            f"{run_dir}: the {op} request is {len(payload) / 2**20:.1f} MiB; oak serve accepts requests up to "
            f"{MAX_REQUEST_BYTES // 2**20} MiB (submit a smaller jobs file, or split it)"
        )
    if not path.exists():
        raise NoServer(
            f"{run_dir}: no oak serve is running there (no {SOCKET_NAME}); start one with oak serve --run-dir {run_dir}"
        )
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    name, fd = _bind_name(path)
    try:
        try:
            s.connect(name)
        except (ConnectionRefusedError, FileNotFoundError):
            raise NoServer(f"{run_dir}: no oak serve is running there (its socket refuses connections)") from None
        except PermissionError:
            raise OakInputError(f"{path}: permission denied (the service's socket is its owner's only)") from None
        finally:
            if fd is not None:
                os.close(fd)
        s.sendall(payload)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    except TimeoutError:
        raise OakInputError(f"{run_dir}: oak serve did not answer within {timeout_s:g} s") from None
    except OSError as exc:  # reset, broken pipe: the service died while answering
        raise OakInputError(f"{run_dir}: lost the connection to oak serve ({exc.strerror or exc})") from None
    finally:
        s.close()
    try:
        reply = json.loads(buf.decode())
    except ValueError:
        raise OakInputError(f"{run_dir}: oak serve sent no valid reply") from None
    if not isinstance(reply, dict):
        raise OakInputError(f"{run_dir}: oak serve sent no valid reply")
    return reply
