"""A fleet applied twice against a real kube-apiserver and etcd: what the second run costs
and whether it moves any object's resourceVersion (it must not).

    NVML_MOCK_KWOK_APISERVER=path/to/kube-apiserver \\
        python packages/kwok/bench/bench_reapply.py [NODES]

Needs etcd on PATH (Debian's ``etcd-server``) and openssl. No KWOK: the nodes are not made
Ready, so this measures ``apply`` and the API server alone. Prints the wall time of each
run, the API server's CPU during it, and how many Nodes and ResourceSlices the second and
third runs changed; the first run is the same-run baseline. The load average is printed
beside, as every figure here depends on what else the machine runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nvml_mock_kwok.cli import main
from nvml_mock_kwok.kube import Kube, load_kubeconfig

SELECTOR = "nvml-mock.nvidia.com/fake=true"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _state(kubeconfig: Path) -> dict[str, str]:
    with Kube(load_kubeconfig(kubeconfig)) as kube:
        return {
            f"{path}/{item['metadata']['name']}": item["metadata"]["resourceVersion"]
            for path in ("/api/v1/nodes", "/apis/resource.k8s.io/v1/resourceslices")
            for item in kube.list(path, selector=SELECTOR)
        }


def main_bench(nodes: int) -> int:
    apiserver = os.environ.get("NVML_MOCK_KWOK_APISERVER")
    if not apiserver or not shutil.which("etcd") or not shutil.which("openssl"):
        print("needs NVML_MOCK_KWOK_APISERVER, etcd and openssl", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="reapply-"))
    client, peer, secure = _port(), _port(), _port()
    key = root / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    (root / "tokens.csv").write_text("t,admin,admin,system:masters\n")
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", str(root / "etcd"), "--quota-backend-bytes", "8589934592",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=(root / "etcd.log").open("wb"),
    )  # fmt: skip
    api = subprocess.Popen(
        [apiserver, "--etcd-servers", f"http://127.0.0.1:{client}", "--bind-address", "127.0.0.1",
         "--secure-port", str(secure), "--cert-dir", str(root / "certs"),
         "--token-auth-file", str(root / "tokens.csv"), "--authorization-mode", "RBAC",
         "--service-account-key-file", str(key), "--service-account-signing-key-file", str(key),
         "--service-account-issuer", "https://kubernetes.default.svc",
         "--service-cluster-ip-range", "10.96.0.0/16",
         "--feature-gates", "WatchList=false,DRADeviceTaints=true",
         "--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000",
         "--enable-priority-and-fairness=false"],
        stdout=subprocess.DEVNULL, stderr=(root / "apiserver.log").open("wb"),
    )  # fmt: skip
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{secure}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    try:
        for _ in range(240):
            try:
                with Kube(load_kubeconfig(kubeconfig)) as kube:
                    if kube.request("GET", "/apis/resource.k8s.io/v1", ok_missing=True):
                        break
            except Exception:  # still starting
                time.sleep(0.5)
        doc = root / "topology.yaml"
        main(["--log-level", "warning", "plan", "--nodes", str(nodes), "-o", str(doc)])
        argv = ["--log-level", "warning", "apply", "--topology", str(doc),
                "--kubeconfig", str(kubeconfig), "--no-stages"]  # fmt: skip
        print(f"{nodes} gb200 nodes; load average {os.getloadavg()}")
        states = []
        for run in ("first", "second", "third"):
            cpu, start = _cpu(api.pid), time.monotonic()
            assert main(argv) == 0
            wall, used = time.monotonic() - start, _cpu(api.pid) - cpu
            states.append(_state(kubeconfig))
            moved = sum(states[-1][k] != states[0][k] for k in states[0]) if run != "first" else 0
            print(
                f"{run} apply: {wall:.1f} s wall, kube-apiserver {used:.1f} s CPU, "
                f"{len(states[-1])} objects, {moved} resourceVersion(s) changed since the first"
            )
        print(f"load average {os.getloadavg()}")
    finally:
        for proc in (api, etcd):
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main_bench(int(sys.argv[1]) if len(sys.argv) > 1 else 5000))
