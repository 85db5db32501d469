"""``apply`` against a real kube-apiserver and etcd: a re-run converges, nothing doubles.

Needs a kube-apiserver binary (``NVML_MOCK_KWOK_APISERVER``), etcd on PATH (Debian's
``etcd-server``) and openssl for the service-account key; skipped without them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nvml_mock_kwok.cli import EXIT_OK, main
from nvml_mock_kwok.kube import Kube, load_kubeconfig

APISERVER = os.environ.get("NVML_MOCK_KWOK_APISERVER")
pytestmark = [
    pytest.mark.skipif(not APISERVER, reason="NVML_MOCK_KWOK_APISERVER (kube-apiserver) unset"),
    pytest.mark.skipif(not shutil.which("etcd"), reason="etcd not on PATH (etcd-server)"),
    pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not on PATH"),
]
NODES = "/api/v1/nodes"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SELECTOR = "nvml-mock.nvidia.com/fake=true"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """etcd and kube-apiserver on loopback ports of their own; the kubeconfig."""
    root = tmp_path_factory.mktemp("cluster")
    client, peer, secure = _port(), _port(), _port()
    key = root / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    (root / "tokens.csv").write_text("test-token,admin,admin,system:masters\n", encoding="utf-8")
    etcd_log, api_log = (root / "etcd.log").open("wb"), (root / "apiserver.log").open("wb")
    etcd = subprocess.Popen(
        [
            "etcd",
            "--data-dir", str(root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=etcd_log,
    )  # fmt: skip
    assert APISERVER is not None
    api = subprocess.Popen(
        [
            APISERVER,
            "--etcd-servers", f"http://127.0.0.1:{client}",
            "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1",
            "--secure-port", str(secure),
            "--cert-dir", str(root / "certs"),
            "--token-auth-file", str(root / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-account-key-file", str(key),
            "--service-account-signing-key-file", str(key),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--feature-gates", "WatchList=false,DRADeviceTaints=true",
        ],
        stdout=subprocess.DEVNULL,
        stderr=api_log,
    )  # fmt: skip
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{secure}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: test-token}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n",
        encoding="utf-8",
    )
    try:
        kube = Kube(load_kubeconfig(kubeconfig))
        for _ in range(240):
            try:
                if kube.request("GET", "/apis/resource.k8s.io/v1", ok_missing=True):
                    break
            except Exception:  # still starting
                pass
            if api.poll() is not None:
                log = (root / "apiserver.log").read_text()
                pytest.fail(f"kube-apiserver exited: {log[-2000:]}")
            time.sleep(0.5)
        else:
            pytest.fail("kube-apiserver did not serve resource.k8s.io/v1 within 120 s")
        kube.close()
        yield kubeconfig
    finally:
        _stop(api)
        _stop(etcd)
        etcd_log.close()
        api_log.close()


def _state(kubeconfig: Path) -> dict[str, tuple[str, str]]:
    """Every fake object: kind/name -> (uid, resourceVersion)."""
    with Kube(load_kubeconfig(kubeconfig)) as kube:
        out = {}
        for path in (NODES, SLICES):
            for item in kube.list(path, selector=SELECTOR):
                meta = item["metadata"]
                out[f"{path}/{meta['name']}"] = (meta["uid"], meta["resourceVersion"])
        return out


def test_a_rerun_converges_on_the_same_objects(cluster: Path, tmp_path: Path) -> None:
    doc = tmp_path / "topology.yaml"
    assert main(["plan", "--nodes", "20", "-o", str(doc)]) == EXIT_OK
    argv = ["apply", "--topology", str(doc), "--kubeconfig", str(cluster), "--no-stages"]
    assert main(argv) == EXIT_OK
    first = _state(cluster)
    assert len(first) == 20 + 40
    with Kube(load_kubeconfig(cluster)) as kube:
        node = kube.request("GET", f"{NODES}/kwok-gpu-00019")
        # one request made the Node with its status: the device plugin's resources
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert node["metadata"]["labels"]["nvidia.com/gpu.clique"].endswith(".1")
        piece = kube.request("GET", f"{SLICES}/kwok-gpu-00019-gpu-0")
        assert piece["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

    # a re-run writes nothing: not one object's resourceVersion moves (a watcher of Nodes or
    # slices sees no event), and neither does a third
    assert main(argv) == EXIT_OK
    second = _state(cluster)
    assert second == first
    assert main(argv) == EXIT_OK
    assert _state(cluster) == first

    # a changed fleet converges in place: the status through its subresource
    assert main([*argv, "--memory", "256Gi"]) == EXIT_OK
    again = _state(cluster)
    assert {k: uid for k, (uid, _) in again.items()} == {k: uid for k, (uid, _) in first.items()}
    with Kube(load_kubeconfig(cluster)) as kube:
        node = kube.request("GET", f"{NODES}/kwok-gpu-00003")
        assert node["status"]["capacity"]["memory"] == "256Gi"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"

    # and one more label (as a newer recording might drop one) or the fake taint dropped is
    # still converged: the apply removes what this run no longer makes
    assert main([*argv, "--memory", "256Gi", "--taint"]) == EXIT_OK
    with Kube(load_kubeconfig(cluster)) as kube:
        assert kube.request("GET", f"{NODES}/kwok-gpu-00003")["spec"]["taints"]
    assert main([*argv, "--memory", "256Gi"]) == EXIT_OK
    with Kube(load_kubeconfig(cluster)) as kube:
        assert not kube.request("GET", f"{NODES}/kwok-gpu-00003")["spec"].get("taints")
    settled = _state(cluster)
    assert main([*argv, "--memory", "256Gi"]) == EXIT_OK
    assert _state(cluster) == settled

    assert main(["delete", "--kubeconfig", str(cluster)]) == EXIT_OK
    assert _state(cluster) == {}
