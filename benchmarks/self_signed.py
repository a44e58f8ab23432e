"""Self-signed certificate authorities and the certificates they issue (cryptography, a dev dependency):
made by the tests and by `python -m benchmarks.security_cost`, never by a deployment."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


class Authority:
    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def issue(self, folder: Path, name: str) -> dict[str, str]:
        """A certificate for 127.0.0.1 and localhost (server and client use); the DISTSERVE_TLS_* variables."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        folder.mkdir(parents=True, exist_ok=True)
        files = {"DISTSERVE_TLS_CA": folder / "ca.pem", "DISTSERVE_TLS_CERT": folder / f"{name}.pem",
                 "DISTSERVE_TLS_KEY": folder / f"{name}.key"}
        files["DISTSERVE_TLS_CA"].write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        files["DISTSERVE_TLS_CERT"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files["DISTSERVE_TLS_KEY"].write_bytes(_pem_key(key))
        files["DISTSERVE_TLS_KEY"].chmod(0o600)
        return {var: str(path) for var, path in files.items()}
