"""SSH keys: valid OpenSSH files (checked by ssh-keygen), fresh per job, never in repr."""

import shutil
import subprocess

import pytest

from distributetrain.core.pods.sshkeys import JobKeys, keypair_from_seed
from prerequisites import unavailable

SEED = bytes(range(32))
# RFC 8032 test vector 1: secret key 9d61b1..., public key d75a98...
RFC8032_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")


def test_public_key_matches_rfc8032_vector():
    import base64
    import struct

    blob = base64.b64decode(keypair_from_seed(RFC8032_SECRET, "x").public_openssh.split()[1])
    (type_length,) = struct.unpack(">I", blob[:4])
    assert blob[4 : 4 + type_length] == b"ssh-ed25519"
    assert blob[8 + type_length :] == RFC8032_PUBLIC


def test_deterministic_for_a_seed():
    assert keypair_from_seed(SEED, "c") == keypair_from_seed(SEED, "c")


def test_fresh_keys_per_job():
    first, second = JobKeys.generate("a"), JobKeys.generate("a")
    assert first.client != second.client and first.host != second.host and first.client != first.host


def test_private_key_never_in_repr():
    keys = JobKeys.generate("job")
    assert "PRIVATE" not in repr(keys) and "PRIVATE" not in repr(keys.client)


def test_ssh_keygen_reads_the_private_key(tmp_path):
    if shutil.which("ssh-keygen") is None:
        unavailable("needs ssh-keygen (openssh-client)")
    pair = keypair_from_seed(SEED, "job-comment")
    key_file = tmp_path / "id_ed25519"
    key_file.write_text(pair.private_openssh)
    key_file.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key_file)], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == pair.public_openssh.split()[:2]


def test_bad_seed_length():
    with pytest.raises(ValueError):
        keypair_from_seed(b"short", "c")
