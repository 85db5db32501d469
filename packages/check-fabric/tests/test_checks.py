"""The checks and the verdict's precedence, over plain values."""

from __future__ import annotations

from check_fabric.checks import Expectations, evaluate
from check_fabric.model import ZERO_CLUSTER_UUID, ExitCode, Identity, TopologyAnswer
from fabric_values import UUID_A, UUID_B, gpu


def _answer(identity: Identity | None, revision: int | None = 4) -> TopologyAnswer:
    return TopologyAnswer(
        url="http://topo:8090/v1/nodes/w1/identity",
        node="w1",
        identity=identity,
        domain="cd" if identity else None,
        revision=revision if identity else None,
    )


def test_gpus_that_agree_pass_and_name_the_shared_identity() -> None:
    verdict = evaluate([gpu(0, clique=1), gpu(1, clique=1)], Expectations())
    assert verdict.exit_code is ExitCode.OK
    assert verdict.identity == Identity(UUID_A, 1)
    (check,) = verdict.checks
    assert (check.name, check.passed, check.requested) == ("consistency", True, False)
    assert check.detail == f"2 GPU(s) share clusterUuid {UUID_A} cliqueId 1"


def test_gpus_that_disagree_are_a_mismatch_listing_each_group() -> None:
    gpus = [gpu(0), gpu(1, clique=1), gpu(2), gpu(3, cluster_uuid=UUID_B)]
    verdict = evaluate(gpus, Expectations())
    assert verdict.exit_code is ExitCode.MISMATCH
    assert verdict.identity is None
    (failed,) = verdict.failed
    assert failed.detail == (
        f"GPUs disagree: GPU 0,2: clusterUuid {UUID_A} cliqueId 0; "
        f"GPU 1: clusterUuid {UUID_A} cliqueId 1; "
        f"GPU 3: clusterUuid {UUID_B} cliqueId 0"
    )


def test_clique_ids_differing_alone_is_a_mismatch() -> None:
    assert evaluate([gpu(0, clique=7), gpu(1, clique=8)], Expectations()).exit_code == 3


def test_no_fabric_on_any_gpu_is_not_supported() -> None:
    verdict = evaluate([gpu(0, None), gpu(1, None)], Expectations())
    assert verdict.exit_code is ExitCode.NOT_SUPPORTED
    assert verdict.unsupported == (0, 1)
    assert verdict.checks[0].passed is None


def test_a_node_without_gpus_is_not_supported() -> None:
    verdict = evaluate([], Expectations())
    assert verdict.exit_code is ExitCode.NOT_SUPPORTED
    assert verdict.unsupported == ()


def test_one_gpu_without_fabric_makes_the_node_not_supported() -> None:
    verdict = evaluate([gpu(0), gpu(1, None)], Expectations(clique_id=0))
    assert verdict.exit_code is ExitCode.NOT_SUPPORTED
    assert verdict.unsupported == (1,)
    assert verdict.identity == Identity(UUID_A, 0)


def test_a_mismatch_outranks_a_gpu_without_fabric() -> None:
    verdict = evaluate([gpu(0), gpu(1, None), gpu(2, clique=5)], Expectations())
    assert verdict.exit_code is ExitCode.MISMATCH


def test_expected_clique() -> None:
    gpus = [gpu(0, clique=1), gpu(1, clique=1)]
    assert evaluate(gpus, Expectations(clique_id=1)).exit_code is ExitCode.OK
    verdict = evaluate(gpus, Expectations(clique_id=2))
    assert verdict.exit_code is ExitCode.MISMATCH
    (failed,) = verdict.failed
    assert failed.name == "expect-clique"
    assert (
        failed.detail
        == "expected cliqueId 2, but GPU 0 reports cliqueId 1, GPU 1 reports cliqueId 1"
    )


def test_expected_clique_zero_is_checked_not_ignored() -> None:
    assert evaluate([gpu(0, clique=3)], Expectations(clique_id=0)).exit_code is ExitCode.MISMATCH


def test_expected_cluster_uuid() -> None:
    gpus = [gpu(0), gpu(1)]
    assert evaluate(gpus, Expectations(cluster_uuid=UUID_A)).exit_code is ExitCode.OK
    verdict = evaluate(gpus, Expectations(cluster_uuid=UUID_B))
    assert verdict.exit_code is ExitCode.MISMATCH
    assert verdict.failed[0].name == "expect-cluster-uuid"
    assert f"expected clusterUuid {UUID_B}" in verdict.failed[0].detail


def test_expectations_on_a_node_without_fabric_are_skipped_and_it_stays_not_supported() -> None:
    verdict = evaluate([gpu(0, None)], Expectations(clique_id=1, cluster_uuid=UUID_A))
    assert verdict.exit_code is ExitCode.NOT_SUPPORTED
    assert [c.passed for c in verdict.checks] == [None, None, None]
    assert verdict.checks[1].detail == "not checked: no GPU reports fabric info (want 1)"


def test_require_completed() -> None:
    done = [gpu(0), gpu(1)]
    assert evaluate(done, Expectations(require_completed=True)).exit_code is ExitCode.OK
    # Without the flag a GPU still registering passes, as with the reference tool.
    busy = [gpu(0), gpu(1, state=2)]
    assert evaluate(busy, Expectations()).exit_code is ExitCode.OK
    verdict = evaluate(busy, Expectations(require_completed=True))
    assert verdict.exit_code is ExitCode.MISMATCH
    assert verdict.failed[0].detail == "registration not completed: GPU 1 state in_progress (2)"


def test_require_completed_also_wants_a_successful_probe_status() -> None:
    verdict = evaluate([gpu(0, status=999)], Expectations(require_completed=True))
    assert (
        verdict.failed[0].detail
        == "registration not completed: GPU 0 state completed (3) status 999"
    )


def test_topology_agreeing() -> None:
    verdict = evaluate([gpu(0, clique=1)], Expectations(topology=_answer(Identity(UUID_A, 1))))
    assert verdict.exit_code is ExitCode.OK
    assert verdict.checks[-1].detail == (
        "topology service (http://topo:8090/v1/nodes/w1/identity, node w1, revision 4) "
        f"agrees: clusterUuid {UUID_A} cliqueId 1"
    )


def test_topology_disagreeing_on_clique_or_cluster() -> None:
    answer = _answer(Identity(UUID_A, 1))
    for gpus in ([gpu(0, clique=0)], [gpu(0, cluster_uuid=UUID_B, clique=1)]):
        verdict = evaluate(gpus, Expectations(topology=answer))
        assert verdict.exit_code is ExitCode.MISMATCH
        assert verdict.failed[0].name == "topology"
        assert (
            f"says clusterUuid {UUID_A} cliqueId 1, but GPU 0 reports" in verdict.failed[0].detail
        )


def test_topology_no_clique_and_no_registered_identity_agree() -> None:
    for gpus in ([gpu(0, cluster_uuid=ZERO_CLUSTER_UUID)], [gpu(0, state=1)], [gpu(0, None)]):
        verdict = evaluate(gpus, Expectations(topology=_answer(None)))
        assert verdict.checks[-1].passed is True, gpus


def test_topology_no_clique_but_a_gpu_claims_one_is_a_mismatch() -> None:
    verdict = evaluate([gpu(0, clique=2)], Expectations(topology=_answer(None)))
    assert verdict.exit_code is ExitCode.MISMATCH
    assert verdict.failed[0].detail == (
        "topology service (http://topo:8090/v1/nodes/w1/identity, node w1) places the node in "
        f"no clique, but GPU 0 reports clusterUuid {UUID_A} cliqueId 2"
    )


def test_topology_identity_on_a_node_without_fabric_stays_not_supported() -> None:
    verdict = evaluate([gpu(0, None)], Expectations(topology=_answer(Identity(UUID_A, 1))))
    assert verdict.exit_code is ExitCode.NOT_SUPPORTED
    assert verdict.checks[-1].passed is None
