"""The Jobs of a rollout step's validation (``workload/validating``), against in-memory
API servers and a fake clock: a Job that sets ttlSecondsAfterFinished fails the
validation at once, naming the field, and is never created; a new run removes the
Jobs an earlier run left whatever its own Jobs are named (and, refused the list of
Jobs, starts all the same); and a run's Jobs are
always among what it records as created, however many objects it applies."""

from __future__ import annotations

from typing import Any

from crs_controller.core.errors import APIError

from .builders import configmap_source, payload
from .test_validating import JOB_KEY, bed, job


async def test_a_job_with_a_ttl_fails_the_validation_naming_the_field() -> None:
    smoke = job()
    smoke["spec"]["ttlSecondsAfterFinished"] = 0
    b = await bed(configmap_source("smoke-test", smoke))
    done = await b.validate(None)
    assert done.record.phase == "Failed"
    assert done.failure is not None and "spec.ttlSecondsAfterFinished" in done.failure
    assert JOB_KEY not in b.workload.objects


async def test_a_new_run_removes_an_earlier_runs_job_of_another_name() -> None:
    b = await bed(configmap_source("smoke-test", job()), configmap_source("smoke-2", job("s2")))
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record
    assert failed.phase == "Failed" and JOB_KEY in b.workload.objects  # kept, for debugging
    running = await b.validate(failed, revision="r2", resources=(("ConfigMap", "smoke-2"),))
    assert running.record.phase == "Running"
    assert JOB_KEY not in b.workload.objects  # the earlier run's Job is gone
    b.workload.objects[("batch/v1", "Job", "default", "s2")]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    done = await b.validate(running.record, revision="r2", resources=(("ConfigMap", "smoke-2"),))
    assert done.record.phase == "Succeeded"
    assert b.workload.objects == {}


async def test_a_refused_list_of_jobs_does_not_stop_a_new_run() -> None:
    b = await bed(configmap_source("smoke-test", job()), configmap_source("smoke-2", job("s2")))
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record

    async def refused(*args: Any, **kwargs: Any) -> Any:
        b.workload.requests.append(("list", "Job/*"))
        raise APIError("list Job: 403 Forbidden", status=403)

    b.workload.list = refused  # type: ignore[method-assign]
    running = await b.validate(failed, revision="r2", resources=(("ConfigMap", "smoke-2"),))
    assert ("list", "Job/*") in b.workload.requests  # the positive sign: it asked
    assert running.record.phase == "Running" and ("apply", "Job/s2") in b.workload.writes()


async def test_the_runs_job_decides_it_however_many_objects_come_before() -> None:
    many = [payload(f"probe-{n:02}") for n in range(50)]
    b = await bed(configmap_source("smoke-test", *many, job()))
    running = (await b.validate(None)).record
    b.workload.finish_job("Complete")
    done = await b.validate(running)
    assert done.record.phase == "Succeeded", done.record.message
    assert JOB_KEY not in b.workload.objects
