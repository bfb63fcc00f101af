"""Pre-flight checks: a --env-from-secret Secret missing is bad input, found before anything is created."""

import pytest

from distributetrain.core import errors, exitcodes
from distributetrain.core.settings import JobSettings
from distributetrain.manager.pods import podchecks
from distributetrain.manager.reporting.errorcodes import exit_code_of

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1",
                       env_from_secrets=("s3-creds", "wandb"))


class SecretsOnly:
    """The one API read the check makes, over Secrets held in memory; any write fails the test."""

    def __init__(self, namespace, names):
        self.secrets = {(namespace, name): {"metadata": {"name": name, "namespace": namespace}} for name in names}
        self.reads = []

    def read(self, kind, namespace, name):
        self.reads.append((kind, namespace, name))
        return self.secrets.get((namespace, name))


def test_every_secret_present_in_the_jobs_namespace_passes():
    kube = SecretsOnly("ml", ["s3-creds", "wandb"])
    podchecks.require_env_secrets(kube, SETTINGS)
    assert kube.reads == [("Secret", "ml", "s3-creds"), ("Secret", "ml", "wandb")]


@pytest.mark.parametrize("namespace,present", [("ml", ["s3-creds"]), ("other", ["s3-creds", "wandb"])])
def test_a_missing_secret_is_bad_input_naming_the_flag_and_the_secret(namespace, present):
    with pytest.raises(errors.UsageError) as raised:
        podchecks.require_env_secrets(SecretsOnly(namespace, present), SETTINGS)
    assert raised.value.flag == "--env-from-secret" and exit_code_of(raised.value) == exitcodes.USAGE
    missing = "s3-creds" if namespace == "other" else "wandb"
    assert f"{missing!r}" in str(raised.value) and "'ml'" in str(raised.value) and "\n" not in str(raised.value)


def test_no_secret_asked_no_read():
    kube = SecretsOnly("ml", [])
    podchecks.require_env_secrets(kube, SETTINGS.replace(env_from_secrets=()))
    assert kube.reads == []
