"""The HTTP listener of `oak serve` (issue [hardening], item 2 and the token friction): plain HTTP only on
loopback unless asked, HTTPS with the user's certificate, and a bearer token that survives restarts or comes
from the user's own file."""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from oak.errors import OakInputError
from oak.service.protocol import TOKEN_NAME, Listeners, is_loopback


def _handler(op: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "text": "oak_up 1\n"}


def _dir(tmp_path: Path, name: str = "run") -> Path:
    d = tmp_path / name
    d.mkdir(mode=0o700)
    return d


def test_loopback_names() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("no-such-host.invalid")


def test_plain_http_beyond_loopback_needs_tls_or_an_explicit_flag(tmp_path: Path) -> None:
    with pytest.raises(OakInputError, match=r"--listen 0\.0\.0\.0:0: plain HTTP there sends the bearer token"):
        Listeners(_dir(tmp_path), _handler, ("0.0.0.0", 0))
    listeners = Listeners(_dir(tmp_path, "ok"), _handler, ("0.0.0.0", 0), insecure_http=True)
    try:
        assert listeners.address is not None and listeners.address[1] > 0
    finally:
        listeners.close()


def _get(url: str, token: str, context: ssl.SSLContext | None = None) -> bytes:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10, context=context) as resp:
        return bytes(resp.read())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_with_the_users_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    run_dir = _dir(tmp_path)
    listeners = Listeners(run_dir, _handler, ("0.0.0.0", 0), tls=(cert, key))
    try:
        assert listeners.address is not None
        port = listeners.address[1]
        token = (run_dir / TOKEN_NAME).read_text().strip()
        context = ssl.create_default_context(cafile=str(cert))
        assert _get(f"https://127.0.0.1:{port}/metrics", token, context) == b"oak_up 1\n"
        with pytest.raises(urllib.error.HTTPError) as exc:
            _get(f"https://127.0.0.1:{port}/metrics", "wrong" * 10, context)
        assert exc.value.code == 401
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _get(f"http://127.0.0.1:{port}/metrics", token)  # plain HTTP to the TLS port: no answer
    finally:
        listeners.close()
    with pytest.raises(OakInputError, match="not a usable certificate and key"):
        Listeners(_dir(tmp_path, "bad"), _handler, ("127.0.0.1", 0), tls=(key, cert))


def test_the_token_survives_a_restart_or_comes_from_the_users_file(tmp_path: Path) -> None:
    """The token changed at every restart (Prometheus scrapers broke); now it is kept, or read from a file."""
    run_dir = _dir(tmp_path)
    tokens = []
    for _ in range(2):
        listeners = Listeners(run_dir, _handler, ("127.0.0.1", 0))
        tokens.append((run_dir / TOKEN_NAME).read_text().strip())
        assert listeners.address is not None
        assert _get(f"http://127.0.0.1:{listeners.address[1]}/metrics", tokens[-1]) == b"oak_up 1\n"
        listeners.close()
    assert tokens[0] == tokens[1] and len(tokens[0]) >= 32
    mine = tmp_path / "token.txt"
    mine.write_text("s" * 40 + "\n")
    mine.chmod(0o644)
    with pytest.raises(OakInputError, match=r"--token-file .*token.txt: readable by others \(mode 644\)"):
        Listeners(run_dir, _handler, ("127.0.0.1", 0), token_file=mine)
    mine.chmod(0o600)
    listeners = Listeners(run_dir, _handler, ("127.0.0.1", 0), token_file=mine)
    try:
        assert listeners.address is not None
        assert _get(f"http://127.0.0.1:{listeners.address[1]}/metrics", "s" * 40) == b"oak_up 1\n"
        assert (run_dir / TOKEN_NAME).read_text().strip() == "s" * 40
    finally:
        listeners.close()
    mine.write_text("short\n")
    with pytest.raises(OakInputError, match="at least 32 characters"):
        Listeners(run_dir, _handler, ("127.0.0.1", 0), token_file=mine)


def test_a_kept_token_that_cannot_be_kept_is_refused_not_replaced(tmp_path: Path) -> None:
    """RUN_DIR/token readable by others was silently replaced by a new token: scrapers got 401 with no word."""
    run_dir = _dir(tmp_path)
    (run_dir / TOKEN_NAME).write_text("k" * 40 + "\n")
    (run_dir / TOKEN_NAME).chmod(0o640)
    with pytest.raises(OakInputError, match=r"readable by others \(mode 640\); chmod 600 it \(or delete it"):
        Listeners(run_dir, _handler, ("127.0.0.1", 0))
    assert (run_dir / TOKEN_NAME).read_text().strip() == "k" * 40


def test_connections_are_capped_and_cut_at_their_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections that trickle a header line every few seconds (the idle timeout restarts at each) were served for
    ever, one thread and descriptor each, with no cap: ~900 of them, with no token, ended oak serve."""
    import socket
    import time

    from oak.service import protocol

    monkeypatch.setattr(protocol, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(protocol, "HTTP_DEADLINE_S", 1.5)
    listeners = Listeners(_dir(tmp_path), _handler, ("127.0.0.1", 0))
    try:
        assert listeners.address is not None
        port = listeners.address[1]
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        for s in held:
            s.sendall(b"GET / HTTP/1.1\r\n")
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)  # over the cap: told so and closed
        assert extra.recv(100).startswith(b"HTTP/1.1 503")
        extra.close()
        t0 = time.monotonic()
        for s in held:  # a header line each half second, yet each is closed at its deadline
            s.settimeout(0.5)
            closed = False
            while not closed and time.monotonic() - t0 < 8.0:
                try:
                    closed = s.recv(4096) == b""
                except TimeoutError:
                    with contextlib.suppress(OSError):
                        s.sendall(b"X-Trickle: a\r\n")
                except OSError:
                    closed = True
            s.close()
            assert closed, "a trickling connection was kept past its deadline"
        assert time.monotonic() - t0 < 6.0
        token = (tmp_path / "run" / TOKEN_NAME).read_text().strip()
        assert _get(f"http://127.0.0.1:{port}/metrics", token) == b"oak_up 1\n"  # served again once they are gone
    finally:
        listeners.close()


def test_ipv6_loopback_any_case_bearer_and_an_odd_refresh(tmp_path: Path) -> None:
    """`--listen [::1]:PORT` (documented) failed: the server was IPv4 only. `bearer` (the scheme is
    case-insensitive, RFC 7235) was refused, and a 401 did not say which scheme (RFC 6750). `?refresh=²` (a
    digit to str.isdigit, not to int) closed the connection with no reply and a traceback in the log."""
    import socket

    probe = socket.socket(socket.AF_INET6)
    try:
        probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    finally:
        probe.close()
    run_dir = _dir(tmp_path)
    listeners = Listeners(run_dir, _handler, ("::1", 0))
    try:
        assert listeners.address is not None
        base = f"http://[::1]:{listeners.address[1]}"
        token = (run_dir / TOKEN_NAME).read_text().strip()
        req = urllib.request.Request(f"{base}/metrics", headers={"Authorization": f"bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.read() == b"oak_up 1\n"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/metrics", timeout=10)
        assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Bearer")
        for odd in ("%C2%B2", "9" * 5000):
            req = urllib.request.Request(f"{base}/?refresh={odd}", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
    finally:
        listeners.close()
