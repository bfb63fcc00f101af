"""The cluster's PKI (localcluster/localcluster/certs.py): a CA, and the server and client
certificates it issues, each with the extensions a component checks, in order."""

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from localcluster import certs

KEY_USAGE = dict(digital_signature=True, content_commitment=False, key_encipherment=False,
                 data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return certs.ensure_pki(tmp_path_factory.mktemp("pki"))


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def extensions(cert: x509.Certificate) -> list[tuple[x509.ExtensionType, bool]]:
    return [(extension.value, extension.critical) for extension in cert.extensions]


def issued_by_the_ca(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    return cert.issuer == ca.subject and cert.signature_hash_algorithm.name == "sha256"


def leaf_extensions(ca: x509.Certificate, usage: x509.ObjectIdentifier) -> list[tuple[x509.ExtensionType, bool]]:
    return [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.KeyUsage(**KEY_USAGE, key_cert_sign=False, crl_sign=False), True),
        (x509.ExtendedKeyUsage([usage]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()), False),
    ]


def test_the_ca_signs_itself_and_may_sign_certificates_only(pki):
    ca = load(pki.ca_cert)
    assert ca.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, certs.CA_COMMON_NAME)])
    assert issued_by_the_ca(ca, ca)
    assert extensions(ca) == [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (x509.KeyUsage(**KEY_USAGE, key_cert_sign=True, crl_sign=True), True),
        (x509.SubjectKeyIdentifier.from_public_key(ca.public_key()), False),
    ]
    assert ca.not_valid_after_utc - ca.not_valid_before_utc == certs.CERT_VALIDITY + certs.CLOCK_SKEW_ALLOWANCE


def test_a_server_certificate_names_every_address_it_serves(pki):
    ca, apiserver = load(pki.ca_cert), load(pki.cert("apiserver"))
    assert apiserver.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    assert issued_by_the_ca(apiserver, ca)
    sans = [x509.DNSName(name) for name in certs.APISERVER_DNS_NAMES] + [
        x509.IPAddress(ipaddress.ip_address(address)) for address in certs.APISERVER_IPS]
    assert extensions(apiserver) == leaf_extensions(ca, ExtendedKeyUsageOID.SERVER_AUTH) + [
        (x509.SubjectAlternativeName(sans), False)]
    assert apiserver.not_valid_after_utc - apiserver.not_valid_before_utc == (
        certs.CERT_VALIDITY + certs.CLOCK_SKEW_ALLOWANCE)


def test_a_client_certificate_names_its_user_and_groups(pki):
    ca, admin = load(pki.ca_cert), load(pki.cert(certs.ADMIN.name))
    assert admin.subject == x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-admin")])
    assert issued_by_the_ca(admin, ca)
    assert extensions(admin) == leaf_extensions(ca, ExtendedKeyUsageOID.CLIENT_AUTH)
