"""The HTTP listener of `oak serve` (issue [hardening], item 2 and the token friction): plain HTTP only on
loopback unless asked, HTTPS with the user's certificate, and a bearer token that survives restarts or comes
from the user's own file."""

from __future__ import annotations

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
