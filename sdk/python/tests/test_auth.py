import asyncio
import hashlib
import secrets
import subprocess
from pathlib import Path

import pytest

import harbinger
from harbinger import Message
from brokerproc import Broker


def self_signed(dir: Path) -> tuple[Path, Path]:
    cert, key = dir / "cert.pem", dir / "key.pem"
    subprocess.run([
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    ], check=True, capture_output=True)
    return cert, key


def test_token_and_tls(tmp_path: Path) -> None:
    token = "hbr_" + secrets.token_hex(16)
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - name: \"sdk-test\"\n    sha256: {hashlib.sha256(token.encode()).hexdigest()}\n"
        "    scopes: [\"publish:py.\", \"read\"]\n")
    cert, key = self_signed(tmp_path)
    b = Broker(extra=("-tokens", str(tokens), "-tls-cert", str(cert), "-tls-key", str(key)))
    addr = b.start()
    try:
        async def main() -> None:
            ca = cert.read_bytes()
            async with harbinger.Client(addr, token=token, root_certificates=ca) as c:
                assert await c.publish(Message(queue="py.auth"))
                with pytest.raises(harbinger.PermissionDenied):
                    await c.publish(Message(queue="other"))
                with pytest.raises(harbinger.PermissionDenied):
                    await c.purge_queue("py.auth")
            async with harbinger.Client(addr, token="hbr_wrong", root_certificates=ca) as c:
                with pytest.raises(harbinger.Unauthenticated):
                    await c.publish(Message(queue="py.auth"), timeout=10)
            async with harbinger.Client(addr, root_certificates=ca) as c:
                with pytest.raises(harbinger.Unauthenticated):
                    await c.list_queues()
        asyncio.run(main())
    finally:
        b.stop()


def test_token_needs_tls_beyond_loopback() -> None:
    with pytest.raises(ValueError, match="TLS"):
        harbinger.Client("broker.example:7070", token="t")
