"""Fresh SSH keys for each job, in OpenSSH's formats, with no dependency beyond Python.

The seeds baked one private key into the image, shared by every job forever. Here each
job gets two new Ed25519 key pairs, held only in the job's Secret: a client key (chief
-> workers) and a host key (workers' sshd), so the chief can check host keys strictly
and no other job's key opens these workers. Ed25519 public-key derivation is the
RFC 8032 reference arithmetic; key generation is a pure function of the 32-byte seed,
so tests can compare whole Secrets, and ``ssh-keygen -y`` verifies the output.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from dataclasses import dataclass

_P = 2**255 - 19
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_BASE = (
    15112221349535400772501151409588531511454012693041857206046113283949847762202,
    46316835694926478169428394003475163141307993866256225615783033603165251855960,
)
KEY_TYPE = "ssh-ed25519"
SEED_BYTES = 32


@dataclass(frozen=True)
class KeyPair:
    private_openssh: str  # "-----BEGIN OPENSSH PRIVATE KEY-----..." (unencrypted, as ssh-keygen -N '')
    public_openssh: str  # "ssh-ed25519 AAAA... comment"

    def __repr__(self) -> str:  # never let a private key reach a log line
        return f"KeyPair(public_openssh={self.public_openssh!r})"


@dataclass(frozen=True)
class JobKeys:
    client: KeyPair  # the chief logs into workers with it
    host: KeyPair  # every worker's sshd presents it; the chief's known_hosts pins it

    @staticmethod
    def generate(job: str) -> "JobKeys":
        return JobKeys(
            client=keypair_from_seed(os.urandom(SEED_BYTES), f"distributetrain-{job}"),
            host=keypair_from_seed(os.urandom(SEED_BYTES), f"distributetrain-{job}-host"),
        )


def keypair_from_seed(seed: bytes, comment: str) -> KeyPair:
    if len(seed) != SEED_BYTES:
        raise ValueError(f"an Ed25519 seed is {SEED_BYTES} bytes, got {len(seed)}")
    public = _public_key(seed)
    public_blob = _string(KEY_TYPE.encode()) + _string(public)
    check = hashlib.sha256(b"checkint" + seed).digest()[:4]
    private_section = (
        check
        + check
        + public_blob
        + _string(seed + public)
        + _string(comment.encode())
    )
    private_section += bytes(range(1, 1 + (-len(private_section) % 8)))
    body = (
        b"openssh-key-v1\0"
        + _string(b"none")
        + _string(b"none")
        + _string(b"")
        + struct.pack(">I", 1)
        + _string(public_blob)
        + _string(private_section)
    )
    encoded = base64.b64encode(body).decode()
    lines = [encoded[i : i + 70] for i in range(0, len(encoded), 70)]
    private = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END OPENSSH PRIVATE KEY-----\n"
    return KeyPair(private, f"{KEY_TYPE} {base64.b64encode(public_blob).decode()} {comment}")


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _public_key(seed: bytes) -> bytes:
    digest = bytearray(hashlib.sha512(seed).digest()[:32])
    digest[0] &= 248
    digest[31] &= 127
    digest[31] |= 64
    x, y = _scalar_mult(int.from_bytes(digest, "little"))
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _scalar_mult(scalar: int) -> tuple[int, int]:
    # Extended twisted Edwards coordinates (X, Y, Z, T), double-and-add.
    result = (0, 1, 1, 0)
    addend = (_BASE[0], _BASE[1], 1, _BASE[0] * _BASE[1] % _P)
    while scalar:
        if scalar & 1:
            result = _add(result, addend)
        addend = _add(addend, addend)
        scalar >>= 1
    x, y, z, _ = result
    z_inv = pow(z, _P - 2, _P)
    return x * z_inv % _P, y * z_inv % _P


def _add(p: tuple[int, int, int, int], q: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = 2 * t1 * t2 * _D % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P
