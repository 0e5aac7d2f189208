"""A rollout step's validation on one workload cluster (``workload/validating``),
against in-memory API servers and a fake clock: a new run applies its Job and looks
again within seconds; a Complete Job ends it Succeeded with its objects deleted; a
failed Job or the timeout ends it Failed, naming the cluster and the Job, with the
objects kept; objects without a Job pass at once, and fail at the deadline when the server refused
them until then: their creation, or the update of a copy already there (one taken before
the deadline passes); an unusable source fails it; a
finished run is returned without contacting the cluster; another revision starts
anew, clearing the Jobs an earlier run left (a clear that failed is tried again
before anything is applied or judged); a Job the run did not create neither passes
nor fails it (it waits, naming the Job, until the timeout or until the Job goes); a
deletion error is retried without
running anything again; a Secret source's data never reaches a message. Only what a
run created is deleted: an object there before it, one the cluster's binding lists, a
Namespace, and a Job an earlier run did not create are kept (named in the log), as is
what a look whose record was lost created; an earlier revision's record naming what
its run left is carried until the next run."""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
import structlog
import yaml

from crs_controller.core.api.models import (
    ClusterResourceSetBinding,
    ClusterResourceSetBindingSpec,
    CRSBinding,
    ObjectKey,
    ObjectMeta,
    ObjectRef,
    ResourceBinding,
    Validation,
    ValidationRecord,
)
from crs_controller.core.errors import APIError
from crs_controller.core.manifests.documents import RESOURCE_SECRET_TYPE
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.result import RETRY
from crs_controller.engine.reconcile.scope import ClusterScope, CRSPass
from crs_controller.engine.reconcile.validation import validated
from crs_controller.engine.reconcile.workload.validating import (
    POLL_SECONDS,
    Validated,
    validate,
)

from .builders import NS, Obj, cluster, configmap_source, crs, payload
from .fake_clock import FakeClock
from .memory_kube import MemoryKube, World

JOB_KEY = ("batch/v1", "Job", "default", "smoke")
SECRET_VALUE = "hunter2-do-not-show"
PRESENT = "Job default/smoke already present, not created by this validation"


class JobKube(MemoryKube):
    """A workload server whose objects keep their status across applies (the status
    subresource is not the apply's), whose deletes can be made to fail, and which can
    refuse to update the objects of one name (as an admission policy would)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.fail_delete: Exception | None = None
        self.fail_get: Exception | None = None
        self.refuse_update: tuple[str, Exception] | None = None  # (name, the refusal)

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
    ) -> Obj:
        meta = obj["metadata"]
        key = self._key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if self.refuse_update is not None and key in self.objects:
            name, refusal = self.refuse_update
            if meta["name"] == name:
                self.requests.append(("apply", f"{obj['kind']}/{name}"))
                raise refusal
        status = (self.objects.get(key) or {}).get("status")
        live = await super().apply(obj, field_manager=field_manager, force=force, dry_run=dry_run)
        if status is not None and not dry_run:
            self.objects[key]["status"] = status
            live["status"] = copy.deepcopy(status)
        return live

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        found = await super().get(api_version, kind, name, namespace)
        if self.fail_get is not None:
            raise self.fail_get
        return found

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        if self.fail_delete is not None:
            self.requests.append(("delete", f"{kind}/{name}"))
            raise self.fail_delete
        return await super().delete(
            api_version, kind, name, namespace, uid=uid, resource_version=resource_version
        )

    def finish_job(self, kind: str, reason: str = "", message: str = "") -> None:
        condition = {"type": kind, "status": "True", "reason": reason, "message": message}
        self.objects[JOB_KEY]["status"] = {"conditions": [condition]}


def job(name: str = "smoke") -> Obj:
    container = {"name": "t", "image": "busybox", "command": ["true"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},  # no namespace: "default", as kubectl would
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def secret_source(name: str, *objects: Obj) -> Obj:
    text = yaml.safe_dump_all(objects).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "type": RESOURCE_SECRET_TYPE,
        "data": {"a": base64.b64encode(text).decode()},
    }


class Bed:
    """One CRS, one Cluster (c1), its workload server and a fake clock."""

    def __init__(self, world: World, workload: JobKube) -> None:
        self.world = world
        self.workload = workload
        clock = world.ctx.clock
        assert isinstance(clock, FakeClock)
        self.clock = clock

    async def validate(
        self,
        previous: ValidationRecord | None,
        *,
        resources: tuple[tuple[str, str], ...] = (("ConfigMap", "smoke-test"),),
        revision: str = "r2",
        step: int = 1,
        listed: frozenset[ObjectKey] = frozenset(),
    ) -> Validated:
        refs = [{"kind": kind, "name": name} for kind, name in resources]
        spec = Validation.model_validate({"resources": refs, "timeout": "10m"})
        the_crs = self.world.index.crs(NS, "a")
        the_cluster = self.world.index.cluster(NS, "c1")
        assert the_crs is not None and the_cluster is not None
        return await validate(
            self.world.ctx,
            self.workload,
            the_crs,
            the_cluster,
            step=step,
            spec=spec,
            timeout=600.0,
            revision=revision,
            previous=previous,
            listed=listed,
        )


async def bed(*sources: Obj) -> Bed:
    workload = JobKube("c1")
    world = World({"c1": workload})
    await world.add(configmap_source("src", payload("addon")))
    await world.add(crs("a", "src"))
    await world.add(cluster("c1"))
    for source in sources or (configmap_source("smoke-test", payload("smoke-config"), job()),):
        await world.add(source)
    return Bed(world, workload)


async def test_a_new_run_applies_the_job_and_looks_again_within_seconds() -> None:
    b = await bed()
    done = await b.validate(None)
    assert done.record.phase == "Running"
    assert done.record.started == b.clock.wall()
    assert (done.record.revision, done.record.step) == ("r2", 1)
    assert done.failure is None
    assert done.then.requeue_after is not None and done.then.requeue_after <= POLL_SECONDS
    assert ("apply", "Job/smoke") in b.workload.writes()
    assert "default/smoke" in done.record.message


async def test_a_complete_job_ends_it_succeeded_and_its_objects_are_deleted() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.clock.advance(30)
    b.workload.finish_job("Complete")
    done = await b.validate(running)
    assert done.record.phase == "Succeeded"
    assert done.record.finished == b.clock.wall()
    assert done.failure is None and done.then.requeue_after is None
    assert b.workload.objects == {}


async def test_a_failed_job_ends_it_failed_and_keeps_the_objects() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded", "Job has reached the backoff limit")
    done = await b.validate(running)
    assert done.record.phase == "Failed" and done.record.finished == b.clock.wall()
    assert done.failure == done.record.message
    assert done.failure == (
        "validation on cluster c1: Job default/smoke failed: "
        "BackoffLimitExceeded: Job has reached the backoff limit"
    )
    assert JOB_KEY in b.workload.objects
    assert ("v1", "ConfigMap", "default", "smoke-config") in b.workload.objects


async def test_a_job_condition_is_made_safe_and_cut_short() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.workload.finish_job("Failed", "Bad\x1b[31m", "x" * 5000)
    done = await b.validate(running)
    assert done.failure is not None
    assert "\x1b" not in done.failure and "Bad\\x1b[31m" in done.failure
    assert len(done.failure) < 500


async def test_the_timeout_fails_it_naming_the_job_and_sends_nothing_more() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.clock.advance(300)
    halfway = await b.validate(running)
    assert halfway.record.phase == "Running"
    b.clock.advance(300)
    b.workload.requests.clear()
    done = await b.validate(halfway.record)
    assert done.record.phase == "Failed"
    assert done.failure == (
        "validation on cluster c1 timed out after 10m: Job default/smoke not Complete"
    )
    assert b.workload.writes() == []  # kept as it was, for whoever looks into it
    assert JOB_KEY in b.workload.objects


async def test_the_next_look_never_comes_after_the_deadline() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.clock.advance(598)
    done = await b.validate(running)
    assert done.then.requeue_after == pytest.approx(2.0)


async def test_objects_without_a_job_pass_at_once_and_are_deleted() -> None:
    b = await bed(configmap_source("smoke-test", payload("probe")))
    done = await b.validate(None)
    assert done.record.phase == "Succeeded" and done.failure is None
    assert ("apply", "ConfigMap/probe") in b.workload.writes()
    assert b.workload.objects == {}


async def test_a_missing_source_fails_it_naming_the_source() -> None:
    b = await bed()
    done = await b.validate(None, resources=(("ConfigMap", "smoke-test"), ("Secret", "gone")))
    assert done.record.phase == "Failed"
    assert done.failure is not None
    assert "cluster c1" in done.failure and "Secret default/gone" in done.failure
    assert "ResourceNotFound" in done.failure
    assert b.workload.requests == []


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_a_finished_run_is_returned_as_is_without_contacting_the_cluster(
    phase: str,
) -> None:
    b = await bed()
    started = b.clock.wall() - timedelta(minutes=3)
    previous = ValidationRecord(
        revision="r2",
        step=1,
        phase=phase,  # type: ignore[arg-type]
        started=started,
        finished=started + timedelta(minutes=1),
        message="validation on cluster c1: Job default/smoke failed: X"
        if phase == "Failed"
        else "",
    )
    done = await b.validate(previous)
    assert done.record == previous
    assert done.failure == (previous.message if phase == "Failed" else None)
    assert done.then.requeue_after is None and not done.then.retry
    assert b.workload.requests == []


async def test_another_revision_starts_a_new_run_clearing_what_an_earlier_run_left() -> None:
    b = await bed()
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record
    assert failed.phase == "Failed"
    old_uid = b.workload.objects[JOB_KEY]["metadata"]["uid"]

    b.clock.advance(60)
    done = await b.validate(failed, revision="r2")
    assert (done.record.revision, done.record.phase) == ("r2", "Running")
    assert done.record.started == b.clock.wall() and done.record.finished is None
    assert done.failure is None
    job_now = b.workload.objects[JOB_KEY]
    assert job_now["metadata"]["uid"] != old_uid and "status" not in job_now
    # The earlier run's ConfigMap, there before this run's apply, is its to delete too.
    b.workload.finish_job("Complete")
    ended = await b.validate(done.record)
    assert ended.record.phase == "Succeeded" and b.workload.objects == {}


async def test_a_running_record_of_another_step_starts_a_new_run() -> None:
    b = await bed()
    old = (await b.validate(None, step=1)).record
    b.clock.advance(60)
    done = await b.validate(old, step=2)
    assert (done.record.step, done.record.started) == (2, b.clock.wall())


async def test_a_job_deleted_meanwhile_is_applied_again() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    del b.workload.objects[JOB_KEY]
    b.workload.requests.clear()
    done = await b.validate(running)
    assert done.record.phase == "Running"
    assert ("apply", "Job/smoke") in b.workload.writes()
    assert JOB_KEY in b.workload.objects


async def test_a_deletion_error_is_retried_without_running_anything_again() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.workload.finish_job("Complete")
    b.workload.fail_delete = APIError("delete refused", status=500)
    passed = await b.validate(running)
    assert passed.record.phase == "Running" and passed.failure is None
    assert passed.record.finished == b.clock.wall()
    assert passed.then.requeue_after is not None and passed.then.requeue_after <= POLL_SECONDS

    b.clock.advance(700)  # past the timeout: it passed already, nothing fails now
    b.workload.fail_delete = None
    b.workload.requests.clear()
    done = await b.validate(passed.record)
    assert done.record.phase == "Succeeded" and done.record.finished == passed.record.finished
    assert [verb for verb, _ in b.workload.writes()] == ["delete", "delete"]
    assert b.workload.objects == {}
    # What the binding entry records reads back the same.
    stored = passed.record.model_dump(mode="json", by_alias=True)
    assert ValidationRecord.model_validate(stored) == passed.record


async def test_an_api_error_on_a_read_keeps_it_running_with_a_retry() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.workload.fail_get = APIError("GET failed", status=500)
    done = await b.validate(running)
    assert done.record.phase == "Running" and done.failure is None
    assert done.then == RETRY


async def test_only_what_the_validation_applied_is_deleted() -> None:
    """Removing the objects of a run that passed spares one of the same name that our
    field manager never applied (someone else's since)."""
    b = await bed(configmap_source("smoke-test", payload("probe")))
    await b.workload.create(payload("probe", "theirs"))
    started = b.clock.wall()
    passed = ValidationRecord(revision="r2", step=1, phase="Running", started=started)
    passed = passed.model_copy(update={"finished": started})
    done = await b.validate(passed)
    assert done.record.phase == "Succeeded"
    assert b.workload.writes() == [("create", "ConfigMap/probe")]
    assert ("v1", "ConfigMap", "default", "probe") in b.workload.objects


async def test_a_secret_sources_data_never_reaches_a_message() -> None:
    leaking = payload("probe", SECRET_VALUE)
    b = await bed(secret_source("smoke-secret", leaking, job()))
    resources = (("Secret", "smoke-secret"),)
    b.workload.fail_with = APIError(
        "apply refused",
        status=422,
        body=f'{{"message": "data.v: {SECRET_VALUE} is invalid"}}',
        causes=(("data.v", "Invalid value"),),
    )
    running = await b.validate(None, resources=resources)
    assert running.record.phase == "Running"
    assert "Invalid value" in running.record.message
    b.clock.advance(600)
    done = await b.validate(running.record, resources=resources)
    assert done.failure is not None and "timed out" in done.failure
    for text in (running.record.message, done.failure, done.record.message):
        assert SECRET_VALUE not in text


async def test_objects_the_server_refused_until_the_deadline_fail_it() -> None:
    """No Job to wait for, and the one object refused at every look: the last look,
    which sends nothing, finds it missing and fails the run rather than passing it."""
    b = await bed(configmap_source("smoke-test", payload("probe")))
    b.workload.fail_with = APIError(
        "apply refused", status=422, causes=(("metadata.labels", "FieldValueInvalid"),)
    )
    running = await b.validate(None)
    assert running.record.phase == "Running" and running.then == RETRY
    b.workload.fail_with = None  # the server would take it now: nothing sends it
    b.clock.advance(600)
    b.workload.requests.clear()
    done = await b.validate(running.record)
    assert done.record.phase == "Failed"
    assert done.failure == (
        "validation on cluster c1 timed out after 10m: "
        "not applied: v1 ConfigMap default/probe: apply refused"  # the last look that sent it
    )
    assert b.workload.writes() == []


POLICY_REFUSAL = APIError(
    "apply refused",
    status=422,
    body="ValidatingAdmissionPolicy 'frozen' denied request: probe is frozen",
    causes=(("", "FieldValueForbidden"),),
)


async def smoke_with_an_old_probe(*, source_kind: str = "ConfigMap") -> Bed:
    """A validation of a Job and the ConfigMap "probe", whose old copy (applied by
    our field manager, say by an earlier run) the server refuses to update."""
    new = (payload("probe", SECRET_VALUE), job())
    source = secret_source("smoke-test", *new) if source_kind == "Secret" else None
    b = await bed(source or configmap_source("smoke-test", *new))
    manager = b.world.ctx.settings.field_manager
    await b.workload.apply(payload("probe", "old"), field_manager=manager)
    b.workload.refuse_update = ("probe", POLICY_REFUSAL)
    return b


async def test_an_update_the_server_refused_until_the_deadline_fails_it() -> None:
    """The old copy is there and every Job Complete, but the new content never went
    in: running, saying so, until the timeout, which fails it naming the object and
    the server's cause, without sending anything."""
    b = await smoke_with_an_old_probe()
    running = await b.validate(None)
    assert running.record.phase == "Running" and running.then == RETRY
    refusal = (
        "not applied: v1 ConfigMap default/probe: apply refused: "
        "ValidatingAdmissionPolicy 'frozen' denied request: probe is frozen"
    )
    assert running.record.message == refusal
    b.workload.finish_job("Complete")
    b.clock.advance(300)
    halfway = await b.validate(running.record)
    assert halfway.record.phase == "Running" and halfway.record.message == refusal
    assert ("apply", "ConfigMap/probe") in b.workload.writes()  # sent again, refused again

    b.clock.advance(300)
    b.workload.requests.clear()
    done = await b.validate(halfway.record)
    assert done.record.phase == "Failed"
    assert done.failure == f"validation on cluster c1 timed out after 10m: {refusal}"
    assert b.workload.writes() == []
    assert b.workload.objects[("v1", "ConfigMap", "default", "probe")]["data"] == {"v": "old"}


async def test_a_refused_update_of_a_secret_sources_object_fails_without_its_data() -> None:
    b = await smoke_with_an_old_probe(source_kind="Secret")
    resources = (("Secret", "smoke-test"),)
    running = await b.validate(None, resources=resources)
    assert running.record.message == (
        "not applied: v1 ConfigMap default/probe: apply refused: (object): FieldValueForbidden"
    )
    b.workload.finish_job("Complete")
    b.clock.advance(600)
    done = await b.validate(running.record, resources=resources)
    assert done.failure is not None
    assert "timed out" in done.failure and "ConfigMap default/probe" in done.failure
    for text in (running.record.message, done.failure):
        assert SECRET_VALUE not in text and "frozen" not in text


async def test_an_update_refused_for_a_while_then_taken_passes() -> None:
    b = await smoke_with_an_old_probe()
    running = await b.validate(None)
    assert running.record.message.startswith("not applied: ")
    b.workload.refuse_update = None
    b.clock.advance(300)
    taken = await b.validate(running.record)
    assert taken.record.phase == "Running"
    assert taken.record.message == "waiting for Job default/smoke to complete"
    b.workload.finish_job("Complete")
    b.clock.advance(300)  # the deadline: the last look passes it
    done = await b.validate(taken.record)
    assert done.record.phase == "Succeeded" and done.failure is None
    # The Job the run created is deleted; the probe was there before it: kept.
    assert list(b.workload.objects) == [("v1", "ConfigMap", "default", "probe")]


async def test_a_refusal_is_kept_over_a_read_that_failed_after_it() -> None:
    """A look whose apply was refused and whose read of the Job then failed still
    records the refusal, so the timeout fails it."""
    b = await smoke_with_an_old_probe()
    running = (await b.validate(None)).record
    b.workload.finish_job("Complete")
    b.workload.fail_get = APIError("GET failed", status=500)
    b.clock.advance(300)
    halfway = await b.validate(running)
    assert halfway.then == RETRY and halfway.record.message == running.message
    b.workload.fail_get = None
    b.clock.advance(300)
    done = await b.validate(halfway.record)
    assert done.failure is not None and "ConfigMap default/probe" in done.failure


async def test_errors_until_the_deadline_fail_it_once_the_time_is_up() -> None:
    b = await bed()
    running = (await b.validate(None)).record
    b.workload.fail_get = APIError("GET failed: 503", status=503)
    b.clock.advance(600)
    done = await b.validate(running)
    assert done.failure == "validation on cluster c1 timed out after 10m: GET failed: 503"


# -- what a validation deletes: only what it created ---------------------------------

CONFIG_KEY = ("v1", "ConfigMap", "default", "smoke-config")


async def passed(b: Bed, **options: Any) -> Validated:
    """Run the validation to its end: apply, the Job Complete, then the clean-up."""
    running = await b.validate(None, **options)
    b.clock.advance(30)
    b.workload.finish_job("Complete")
    return await b.validate(running.record, **options)


def scope_with(b: Bed, entry: CRSBinding) -> ClusterScope:
    """The cluster's pass, its binding holding ``entry``."""
    binding = ClusterResourceSetBinding(
        metadata=ObjectMeta(name="c1", namespace=NS),
        spec=ClusterResourceSetBindingSpec(cluster_name="c1", bindings=[entry]),
    )
    the_cluster = b.world.index.cluster(NS, "c1")
    assert the_cluster is not None
    return ClusterScope(b.world.ctx, the_cluster, binding)


async def test_an_object_there_before_the_run_survives_its_success() -> None:
    b = await bed()
    await b.workload.apply(payload("smoke-config", "theirs"), field_manager="kubectl")
    with structlog.testing.capture_logs() as logs:
        done = await passed(b)
    assert done.record.phase == "Succeeded"
    assert list(b.workload.objects) == [CONFIG_KEY]  # the Job it created is gone
    kept = [e for e in logs if e["event"] == "validation object kept"]
    assert [(e["object"], e["log_level"]) for e in kept] == [
        ("ConfigMap/default/smoke-config", "info")
    ]
    assert "theirs" not in str(logs) and "smoke-config" not in str(done.record)


async def test_an_object_the_binding_lists_survives_though_the_run_created_it() -> None:
    """An add-on's object (another CRS's inventory) named in a validation resource."""
    b = await bed()
    addon = ResourceBinding(
        kind="ConfigMap", name="src", applied=True, objects=[ObjectRef(*CONFIG_KEY)]
    )
    scope = scope_with(b, CRSBinding(cluster_resource_set_name="addon", resources=[addon]))
    listed = scope.listed(CRSBinding(cluster_resource_set_name="a"))
    assert ("", "ConfigMap", "default", "smoke-config") in listed
    done = await passed(b, listed=listed)
    assert done.record.phase == "Succeeded"
    assert list(b.workload.objects) == [CONFIG_KEY]


NAMESPACE_KEY = ("v1", "Namespace", "", "smoke-ns")


async def test_a_namespace_the_run_created_is_kept_as_no_allow_delete_names_it() -> None:
    """Validation resources have no allowDelete: a Namespace (or CRD) among their
    objects is kept, like one pruning keeps; what the run created in it is deleted."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "smoke-ns"}}
    in_it = payload("smoke-config") | {"metadata": {"name": "probe", "namespace": "smoke-ns"}}
    b = await bed(configmap_source("smoke-test", namespace, in_it, job()))
    with structlog.testing.capture_logs() as logs:
        done = await passed(b)
    assert list(b.workload.objects) == [NAMESPACE_KEY]
    assert done.record.phase == "Succeeded" and done.record.created is None
    kept = [e["object"] for e in logs if e["event"] == "validation object kept"]
    assert kept == ["Namespace/smoke-ns"]


async def test_the_objects_the_run_created_are_recorded_then_deleted() -> None:
    b = await bed()
    running = await b.validate(None)
    uids = {b.workload.objects[key]["metadata"]["uid"] for key in (JOB_KEY, CONFIG_KEY)}
    assert set(running.record.created or ()) == uids
    b.workload.finish_job("Complete")
    done = await b.validate(running.record)
    assert done.record.phase == "Succeeded" and done.record.created is None
    assert b.workload.objects == {}


async def test_an_object_made_while_the_record_was_lost_is_kept() -> None:
    """The look that created the objects never got its record written: the next
    look cannot tell them from someone else's, keeps them, and does not take the
    Job's state for its own run's."""
    b = await bed()
    await b.validate(None)  # its record lost
    b.workload.finish_job("Complete")
    done = await b.validate(None)
    assert done.record.phase == "Running" and done.record.message == PRESENT
    b.clock.advance(600)
    ended = await b.validate(done.record)
    assert ended.record.phase == "Failed"
    assert set(b.workload.objects) == {JOB_KEY, CONFIG_KEY}


async def test_a_new_run_leaves_a_job_the_earlier_run_did_not_create() -> None:
    b = await bed()
    theirs_job = job() | {"metadata": {"name": "smoke", "namespace": "default"}}
    await b.workload.apply(theirs_job, field_manager="kubectl")  # someone else's Job
    theirs = b.workload.objects[JOB_KEY]["metadata"]["uid"]
    old = (await b.validate(None, revision="r1")).record
    b.clock.advance(600)
    failed = (await b.validate(old, revision="r1")).record
    assert failed.phase == "Failed" and PRESENT in failed.message

    b.clock.advance(60)
    done = await b.validate(failed, revision="r2")
    assert done.record.phase == "Running" and done.record.message == PRESENT
    assert b.workload.objects[JOB_KEY]["metadata"]["uid"] == theirs
    assert ("delete", "Job/smoke") not in b.workload.requests


async def test_an_earlier_revisions_record_naming_what_it_left_is_carried() -> None:
    """Between revisions, passes that run no validation keep the earlier record while
    it names objects its run created, without failing the new revision."""
    b = await bed()
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record
    assert failed.phase == "Failed" and failed.created
    the_crs = b.world.index.crs(NS, "a")
    assert the_crs is not None
    for record, carried in ((failed, failed), (failed.model_copy(update={"created": None}), None)):
        entry = CRSBinding(cluster_resource_set_name="a", validation=record)
        applied = CRSPass(entry, Outcome("Applied", "Applied", "", 1, revision="r2"))
        done = await validated(scope_with(b, entry), the_crs, applied, target="r2", run=False)
        assert done.entry.validation == carried
        assert done.outcome.state == "Applied"


# -- what decides a run: only the Jobs it created --------------------------------------


async def with_their_job(condition: str) -> tuple[Bed, str]:
    """A bed whose workload cluster holds someone else's Job of the validation's name,
    finished (``condition``) before any run; and that Job's uid."""
    b = await bed()
    theirs = job() | {"metadata": {"name": "smoke", "namespace": "default"}}
    await b.workload.apply(theirs, field_manager="kubectl")
    b.workload.finish_job(condition, "Done", "their own run")
    return b, b.workload.objects[JOB_KEY]["metadata"]["uid"]


@pytest.mark.parametrize("condition", ["Complete", "Failed"])
async def test_a_finished_job_there_before_the_run_decides_nothing(condition: str) -> None:
    """Neither passes nor fails the run: it waits, naming the Job, and fails at the
    timeout without sending anything; the Job is kept as it was."""
    b, theirs = await with_their_job(condition)
    running = await b.validate(None)
    assert running.record.phase == "Running" and running.failure is None
    assert running.record.message == PRESENT
    assert running.then.requeue_after is not None and running.then.requeue_after <= POLL_SECONDS
    b.clock.advance(600)
    b.workload.requests.clear()
    done = await b.validate(running.record)
    assert done.failure == f"validation on cluster c1 timed out after 10m: {PRESENT}"
    assert b.workload.writes() == []
    assert b.workload.objects[JOB_KEY]["metadata"]["uid"] == theirs
    assert "their own run" not in str(done.record)


async def test_once_the_job_there_before_is_gone_the_runs_own_job_decides() -> None:
    b, _ = await with_their_job("Complete")
    running = await b.validate(None)
    assert running.record.message == PRESENT
    del b.workload.objects[JOB_KEY]  # its owner removed it
    mine = await b.validate(running.record)
    assert mine.record.message == "waiting for Job default/smoke to complete"
    assert b.workload.objects[JOB_KEY]["metadata"]["uid"] in (mine.record.created or ())
    b.workload.finish_job("Complete")
    done = await b.validate(mine.record)
    assert done.record.phase == "Succeeded" and b.workload.objects == {}


async def test_an_earlier_runs_job_a_new_run_keeps_decides_nothing() -> None:
    """The earlier run created the Job, but the binding lists it now: the new run
    keeps it, and cannot take its old state for its own."""
    b = await bed()
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record
    assert failed.phase == "Failed"
    listed = frozenset({("batch", "Job", "default", "smoke")})
    b.clock.advance(60)
    done = await b.validate(failed, revision="r2", listed=listed)
    assert done.record.phase == "Running" and done.record.message == PRESENT


async def test_a_failed_clear_is_tried_again_before_anything_is_decided() -> None:
    """The earlier run's Failed Job could not be deleted when the new run started:
    the run is not started yet, and its next look clears it before applying."""
    b = await bed()
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record
    old_uid = b.workload.objects[JOB_KEY]["metadata"]["uid"]
    b.clock.advance(60)
    b.workload.fail_delete = APIError("delete refused", status=500)
    b.workload.requests.clear()
    stalled = await b.validate(failed, revision="r2")
    assert stalled.record.phase == "Running" and stalled.then == RETRY
    assert stalled.record.message.startswith("not started: ")
    assert ("apply", "Job/smoke") not in b.workload.writes()

    b.workload.fail_delete = None
    done = await b.validate(stalled.record, revision="r2")
    assert done.record.phase == "Running" and done.failure is None
    job_now = b.workload.objects[JOB_KEY]
    assert job_now["metadata"]["uid"] != old_uid and "status" not in job_now
    b.workload.finish_job("Complete")
    ended = await b.validate(done.record, revision="r2")
    assert ended.record.phase == "Succeeded" and b.workload.objects == {}


async def test_a_clear_refused_until_the_deadline_fails_the_run() -> None:
    b = await bed()
    old = (await b.validate(None, revision="r1")).record
    b.workload.finish_job("Failed", "BackoffLimitExceeded")
    failed = (await b.validate(old, revision="r1")).record
    b.workload.fail_delete = APIError("delete refused", status=500)
    stalled = await b.validate(failed, revision="r2")
    b.clock.advance(600)
    done = await b.validate(stalled.record, revision="r2")
    assert done.failure is not None
    assert done.failure.startswith("validation on cluster c1 timed out after 10m: not started: ")
    assert "delete refused" in done.failure
