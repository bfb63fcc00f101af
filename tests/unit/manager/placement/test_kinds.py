"""A job's kind is chosen once, from --elastic: the shape of its plans."""

from distributetrain.core.settings import JobSettings
from distributetrain.manager.placement.kinds import ElasticJob, StaticJob, kind_of

STATIC = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="i")


def test_the_kind_follows_the_elastic_flag():
    assert isinstance(kind_of(STATIC), StaticJob)
    assert isinstance(kind_of(STATIC.replace(min_gpus=2)), ElasticJob)


def test_an_elastic_job_on_one_node_gets_a_worker_beside_its_chief():
    assert StaticJob().plan({"a": 4}, 4) == [("a", 4)]
    assert ElasticJob().plan({"a": 4}, 4) == [("a", 3), ("a", 1)]
    assert ElasticJob().plan({"a": 3, "b": 1}, 4) == StaticJob().plan({"a": 3, "b": 1}, 4) == [("a", 3), ("b", 1)]
