"""The cluster's PKI: one CA and the certificates every component presents.

Generated once per run directory (the CA outlives `down` unless purged), so
kubeconfigs handed out earlier keep working across restarts. TLS keys are
ECDSA P-256 (fast to generate, accepted everywhere in Kubernetes); the
service-account signing key is RSA 2048, the most widely supported JWT key.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from localcluster import netsetup

log = logging.getLogger(__name__)

CERT_VALIDITY = datetime.timedelta(days=3650)
CLOCK_SKEW_ALLOWANCE = datetime.timedelta(hours=1)
SA_KEY_BITS = 2048
CA_COMMON_NAME = "distributetrain-localcluster-ca"

APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", netsetup.HOST_IP, netsetup.KUBERNETES_SERVICE_IP)


@dataclass(frozen=True)
class ClientIdentity:
    """Who a client certificate authenticates as (CN = user, O = groups)."""

    name: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = ClientIdentity("admin", "kubernetes-admin", ("system:masters",))
CONTROLLER_MANAGER = ClientIdentity("controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("scheduler", "system:kube-scheduler")
APISERVER_KUBELET_CLIENT = ClientIdentity(
    "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
)
CLIENT_IDENTITIES = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, APISERVER_KUBELET_CLIENT)
# The kubelets' serving certificate, valid for every node address.
KUBELET_SERVING_CERT = "kubelet"
# Bound to ClusterRole system:node-proxier by the apiserver's bootstrap policy.
KUBE_PROXY = ClientIdentity("kube-proxy", "system:kube-proxy")
# The apiserver's identity towards aggregated API servers (Kueue's visibility API), which
# trust the user it names in request headers only from this certificate's name.
FRONT_PROXY_CLIENT = ClientIdentity("front-proxy-client", "front-proxy-client")


def node_identity(node_name: str) -> ClientIdentity:
    """A kubelet's identity, as the Node authorizer and NodeRestriction know it."""
    return ClientIdentity(f"node-{node_name}", f"system:node:{node_name}", ("system:nodes",))


@dataclass(frozen=True)
class Pki:
    """File names in the PKI directory; `<name>.crt` and `<name>.key` pairs."""

    directory: Path

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    @property
    def ca_cert(self) -> Path:
        return self.cert("ca")

    @property
    def ca_key(self) -> Path:
        return self.key("ca")

    @property
    def sa_public_key(self) -> Path:
        return self.directory / "sa.pub"

    @property
    def sa_private_key(self) -> Path:
        return self.key("sa")


def ensure_pki(directory: Path) -> Pki:
    """Create the CA and all certificates unless the CA already exists."""
    pki = Pki(directory)
    if pki.ca_cert.exists():
        _renew_kubelet_serving_if_stale(pki)
        return pki
    log.info("generating cluster PKI in %s", directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _new_tls_key()
    ca_cert = _ca_certificate(ca_key)
    _write_pair(pki, "apiserver", *_issue(ca_cert, ca_key, "kube-apiserver", (), server_sans=_apiserver_sans()))
    _write_pair(pki, KUBELET_SERVING_CERT,
                *_issue(ca_cert, ca_key, "localcluster-kubelet", (), server_sans=_kubelet_sans()))
    for identity in CLIENT_IDENTITIES:
        _write_pair(pki, identity.name, *_issue(ca_cert, ca_key, identity.user, identity.groups))
    _write_service_account_keys(pki)
    # The CA certificate is written last: its presence marks the PKI complete.
    _write_private_key(pki.ca_key, ca_key)
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return pki


def ensure_client(pki: Pki, identity: ClientIdentity) -> None:
    """Issue `identity`'s client certificate from the cluster CA, unless it exists."""
    if pki.cert(identity.name).exists():
        return
    ca_cert, ca_key = _load_ca(pki)
    _write_pair(pki, identity.name, *_issue(ca_cert, ca_key, identity.user, identity.groups))


def ensure_server(pki: Pki, name: str, common_name: str, addresses: tuple[str, ...],
                  dns_names: tuple[str, ...] = ()) -> None:
    """Issue a serving certificate for `addresses` and `dns_names` from the cluster CA,
    unless it exists (e.g. Kueue's webhooks on loopback, which the apiserver calls with
    the CA as caBundle)."""
    if pki.cert(name).exists():
        return
    ca_cert, ca_key = _load_ca(pki)
    sans = [x509.DNSName(dns_name) for dns_name in dns_names] + _ip_sans(addresses)
    _write_pair(pki, name, *_issue(ca_cert, ca_key, common_name, (), server_sans=sans))


def _renew_kubelet_serving_if_stale(pki: Pki) -> None:
    """A PKI kept from an earlier version may lack addresses nodes have now (IPv6): the
    apiserver verifies the kubelet's certificate, so it is issued again for them all."""
    current = x509.load_pem_x509_certificate(pki.cert(KUBELET_SERVING_CERT).read_bytes())
    names = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    if set(names) >= set(_kubelet_sans()):
        return
    log.info("issuing the kubelets' serving certificate again, for every node address")
    ca_cert, ca_key = _load_ca(pki)
    _write_pair(pki, KUBELET_SERVING_CERT,
                *_issue(ca_cert, ca_key, "localcluster-kubelet", (), server_sans=_kubelet_sans()))


def _load_ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key} is not the EC key this module writes")
    return ca_cert, ca_key


def _new_tls_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - CLOCK_SKEW_ALLOWANCE, now + CERT_VALIDITY


def _ca_certificate(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)])
    return (
        _certificate(name, name, key.public_key(), ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _certificate(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
                 ca: bool) -> x509.CertificateBuilder:
    """What every certificate of the PKI has: its names and key, a fresh serial, the validity,
    and whether it is a CA, which alone signs certificates; the caller adds the rest and signs."""
    not_before, not_after = _validity()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    )


def _apiserver_sans() -> list[x509.GeneralName]:
    return [x509.DNSName(name) for name in APISERVER_DNS_NAMES] + _ip_sans(APISERVER_IPS)


def _kubelet_sans() -> list[x509.GeneralName]:
    """Every address a node may serve the kubelet API on."""
    return [x509.DNSName("localhost")] + _ip_sans(("127.0.0.1", *netsetup.all_node_ips()))


def _ip_sans(addresses: tuple[str, ...] | list[str]) -> list[x509.GeneralName]:
    return [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]


def _issue(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    organizations: tuple[str, ...],
    server_sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate: a server certificate when SANs are given, else a client one."""
    key = _new_tls_key()
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_sans else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _certificate(x509.Name(subject), ca_cert.subject, key.public_key(), ca=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server_sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(server_sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_pair(pki: Pki, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    _write_private_key(pki.key(name), key)
    pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_service_account_keys(pki: Pki) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=SA_KEY_BITS)
    _write_private_key(pki.sa_private_key, key)
    pki.sa_public_key.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _write_private_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
