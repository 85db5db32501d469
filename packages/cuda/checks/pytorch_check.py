#!/usr/bin/env python3
"""Check an unmodified CUDA build of PyTorch against the mock CUDA stack.

PyTorch loads NVIDIA's libcudart from its wheel by RPATH; the runtime work-alike reaches it
only by preloading, as the NRI plugin does for a pod annotated
``nvml-mock.nvidia.com/cuda-runtime: "true"``. This script does the same on a node it renders
in a temporary directory (no Kubernetes), runs PyTorch in processes of its own, and compares
what PyTorch sees with what NVML says, read by nvidia-ml-py in this process.

    python packages/cuda/checks/pytorch_check.py --torch-python PATH [--profile h100] [--count 8]

``--torch-python`` is an interpreter with ``torch`` installed (``pip install torch==2.14.1``
into a venv of its own); this script itself runs where nvml-mock-cuda, nvml-mock-engine and
nvidia-ml-py are installed. It prints one line per check and exits 1 if any failed.

Inside an annotated pod, where the preload is already set, run the PyTorch half alone:

    python pytorch_check.py --inside

It prints what PyTorch saw as JSON; the NVML comparisons need the launcher.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MIB = 1 << 20
HOLD_BYTES = 256 * MIB
OTHER_BYTES = 1024 * MIB


# ---- the PyTorch half: runs in the torch interpreter, with the work-alike preloaded --------


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


def observe(handshake: bool) -> dict[str, Any]:
    """What PyTorch sees, as plain data; a failure of one step is recorded, not raised."""
    import torch

    seen: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    seen["available"] = torch.cuda.is_available()
    seen["count"] = torch.cuda.device_count()
    if not seen["available"]:
        return seen
    devices = []
    for i in range(seen["count"]):
        p = torch.cuda.get_device_properties(i)
        devices.append(
            {
                "name": torch.cuda.get_device_name(i),
                "uuid": str(p.uuid),
                "total_memory": p.total_memory,
                "cc": [p.major, p.minor],
                "sms": p.multi_processor_count,
                "pci_bus_id": p.pci_bus_id,
            }
        )
    seen["devices"] = devices
    seen["mem_get_info"] = list(torch.cuda.mem_get_info(0))

    steps: dict[str, Any] = {}
    try:
        a = torch.arange(1 << 20, dtype=torch.int64)
        b = a.cuda()
        steps["round_trip"] = {"device": str(b.device), "equal": torch.equal(b.cpu(), a)}
        if seen["count"] > 1:
            c = b.to("cuda:1")
            steps["across_gpus"] = {"device": str(c.device), "equal": torch.equal(c.cpu(), a)}
        r = torch.randint(0, 256, (3 * MIB + 7,), dtype=torch.uint8)
        steps["bytes_round_trip"] = torch.equal(r.cuda().cpu(), r)
    except Exception as exc:
        steps["copy_error"] = _error(exc)
    try:
        target = min(3, seen["count"] - 1)
        torch.cuda.set_device(target)
        steps["set_device"] = {
            "asked": target,
            "current": torch.cuda.current_device(),
            "tensor": torch.empty(4, device="cuda").device.index,
        }
        torch.cuda.set_device(0)
    except Exception as exc:
        steps["set_device_error"] = _error(exc)
    try:
        x = torch.arange(8, dtype=torch.float32).cuda()  # a copy: no kernel yet
        y = x + 1
        torch.cuda.synchronize()
        steps["kernel"] = {"raised": None, "result": y.cpu().tolist()}
    except Exception as exc:
        steps["kernel"] = {"raised": _error(exc)}
    try:
        free_before = torch.cuda.mem_get_info(0)[0]
        held = torch.empty(HOLD_BYTES, dtype=torch.uint8, device="cuda:0")
        free_after = torch.cuda.mem_get_info(0)[0]
        steps["hold"] = {"pid": os.getpid(), "free_drop": free_before - free_after}
        if handshake:
            # the launcher reads NVML in its own process now, and answers with one line
            print(json.dumps({"holding": os.getpid(), "bytes": HOLD_BYTES}), flush=True)
            steps["hold"]["nvml"] = json.loads(sys.stdin.readline())
        del held
        torch.cuda.empty_cache()
    except Exception as exc:
        steps["hold_error"] = _error(exc)
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda:0")
        steps["oom"] = {"raised": None}
    except Exception as exc:
        steps["oom"] = {"raised": _error(exc)}
    seen["steps"] = steps
    return seen


def hold_forever(device: int, size: int) -> None:
    """Another PyTorch process on the GPU: hold memory until stdin closes."""
    import torch

    held = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
    print(json.dumps({"pid": os.getpid(), "bytes": held.numel()}), flush=True)
    sys.stdin.read()


# ---- the launcher: renders a node, runs PyTorch, compares with NVML -----------------------


def render(root: Path, profile: str, count: int) -> Path:
    import nvml_mock_live as live
    from nvml_mock_engine.config import resolve_config
    from nvml_mock_engine.render import render_text

    state = root / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="node-a", profile=profile, count=count)))
    live.create(root / live.LIVE_FILE_NAME, live.read_board(state))
    return state


def node_env(root: Path, state: Path) -> dict[str, str]:
    from nvml_mock_cuda.library import driver_path
    from nvml_mock_engine.library import library_path

    driver = driver_path()
    runtime = driver.parent / "cuda-runtime"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MOCK_", "NVML_MOCK_", "CUDA_")) and k != "LD_PRELOAD"
    }
    env.update(
        LD_LIBRARY_PATH=f"{driver.parent}:{library_path().parent}",
        MOCK_NVML_CONFIG=str(state),
        NVML_MOCK_LOCK_DIR=str(root / "locks"),
        # the NRI plugin's order: the CUDA 13 work-alike first, then 12
        LD_PRELOAD=f"{runtime / 'libcudart.so.13'}:{runtime / 'libcudart.so.12'}",
        PYTHONUNBUFFERED="1",
        PYTHONWARNINGS="ignore",
    )
    return env


def nvml_facts(env: dict[str, str]) -> dict[str, Any]:
    """NVML's view, read in a process of its own (nvidia-ml-py binds the mock by soname)."""
    code = """
import json, pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion_v2(),
       "devices": []}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    pci = n.nvmlDeviceGetPciInfo(h)
    out["devices"].append({"name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h),
        "total_memory": n.nvmlDeviceGetMemoryInfo(h).total, "bus": pci.bus,
        "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
        "processes": [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses(h)]})
print(json.dumps(out))
"""
    nvml_env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=nvml_env, capture_output=True, text=True, check=True
    )
    facts: dict[str, Any] = json.loads(out.stdout)
    return facts


def run_torch(
    torch_python: str, env: dict[str, str], *args: str, nvml_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run observe() in the torch interpreter; answer its hold handshake from NVML."""
    proc = subprocess.Popen(
        [torch_python, __file__, "--inside", *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    last = ""
    for raw in proc.stdout:
        line = raw.strip()
        if line.startswith('{"holding"') and nvml_env is not None:
            pid = json.loads(line)["holding"]
            listed = dict(map(tuple, nvml_facts(nvml_env)["devices"][0]["processes"]))
            proc.stdin.write(json.dumps({"listed": listed.get(pid, 0)}) + "\n")
            proc.stdin.flush()
        elif line:
            last = line
    proc.stdin.close()
    stderr = proc.stderr.read() if proc.stderr else ""
    proc.wait(timeout=600)
    if proc.returncode != 0 or not last.startswith("{"):
        raise SystemExit(f"the PyTorch process failed (exit {proc.returncode}):\n{stderr[-4000:]}")
    result: dict[str, Any] = json.loads(last)
    return result


def evaluate(
    seen: dict[str, Any], nvml: dict[str, Any], other_pid: int, visible: dict[str, Any]
) -> list[tuple[bool, str, str]]:
    """(passed, check, detail) for each check of the report."""
    checks: list[tuple[bool, str, str]] = []

    def check(ok: bool, name: str, detail: str) -> None:
        checks.append((bool(ok), name, detail))

    want = nvml["devices"]
    check(seen["available"], "torch.cuda.is_available()", str(seen["available"]))
    check(seen["count"] == len(want), "device_count", f"{seen['count']} (NVML: {len(want)})")
    if not seen["available"]:
        return checks
    got = seen["devices"]
    check(
        [d["name"] for d in got] == [d["name"] for d in want],
        "names",
        got[0]["name"],
    )
    check(
        [f"GPU-{d['uuid']}" for d in got] == [d["uuid"] for d in want],
        "get_device_properties: UUIDs",
        f"GPU-{got[0]['uuid']}",
    )
    check(
        [d["total_memory"] for d in got] == [d["total_memory"] for d in want]
        and [d["cc"] for d in got] == [d["cc"] for d in want]
        and [d["pci_bus_id"] for d in got] == [d["bus"] for d in want],
        "get_device_properties: memory, compute capability, PCI bus",
        f"{got[0]['total_memory']} bytes, sm_{got[0]['cc'][0]}{got[0]['cc'][1]}, "
        f"{got[0]['sms']} SMs, bus {got[0]['pci_bus_id']:#x}",
    )
    free, total = seen["mem_get_info"]
    check(
        total == want[0]["total_memory"] and 0 < free <= total,
        "torch.cuda.mem_get_info(0)",
        f"free {free}, total {total}",
    )
    steps = seen["steps"]
    rt = steps.get("round_trip", {})
    check(
        rt.get("equal") is True and steps.get("bytes_round_trip") is True,
        "arange(2**20).cuda().cpu() and 3 MiB of random bytes round trip exactly",
        json.dumps(rt) if rt else json.dumps(steps.get("copy_error")),
    )
    across = steps.get("across_gpus", {})
    check(
        across.get("equal") is True and across.get("device") == "cuda:1",
        ".to('cuda:1') across GPUs",
        json.dumps(across),
    )
    sd = steps.get("set_device", {})
    check(
        sd.get("current") == sd.get("asked") == sd.get("tensor"),
        "torch.cuda.set_device",
        json.dumps(sd or steps.get("set_device_error")),
    )
    check(
        visible.get("uuids") == visible.get("want"),
        "CUDA_VISIBLE_DEVICES",
        f"{visible.get('setting')} -> {visible.get('uuids')}",
    )
    raised = steps.get("kernel", {}).get("raised") or {}
    check(
        "runs no GPU code" in raised.get("message", ""),
        "a kernel-backed op (x + 1) raises a clear error",
        f"{raised.get('type')}: {raised.get('message', '').splitlines()[0] if raised else None}",
    )
    hold = steps.get("hold", {})
    listed = hold.get("nvml", {}).get("listed", 0)
    check(
        listed >= HOLD_BYTES and hold.get("free_drop", 0) >= HOLD_BYTES,
        "a 256 MiB tensor is listed by NVML in another process under PyTorch's PID",
        f"pid {hold.get('pid')}: NVML lists {listed} bytes; mem_get_info fell by "
        f"{hold.get('free_drop')}",
    )
    oom = steps.get("oom", {}).get("raised") or {}
    message = oom.get("message", "")
    check(
        oom.get("type") == "OutOfMemoryError"
        and f"Process {other_pid} has" in message
        and "this process has" in message,
        "out of memory: torch.cuda.OutOfMemoryError listing NVML's processes",
        message.split(". If reserved")[0],
    )
    return checks


def launch(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="pytorch-check-") as tmp:
        root = Path(tmp)
        state = render(root, args.profile, args.count)
        env = node_env(root, state)
        nvml_env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
        nvml = nvml_facts(nvml_env)
        # another PyTorch process holds 1 GiB of GPU 0, as a neighbour on a real node would
        other = subprocess.Popen(
            [args.torch_python, __file__, "--hold", "0", str(OTHER_BYTES)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert other.stdout is not None
            other_pid = json.loads(other.stdout.readline())["pid"]
            seen = run_torch(args.torch_python, env, "--handshake", nvml_env=nvml_env)
        finally:
            other.kill()
            other.wait(timeout=60)
        picks = [args.count - 1, 0] if args.count > 1 else [0]
        visible_env = dict(env, CUDA_VISIBLE_DEVICES=",".join(map(str, picks)))
        vis = run_torch(args.torch_python, visible_env)
        visible = {
            "setting": visible_env["CUDA_VISIBLE_DEVICES"],
            "uuids": [f"GPU-{d['uuid']}" for d in vis.get("devices", [])],
            "want": [nvml["devices"][i]["uuid"] for i in picks],
        }
        checks = evaluate(seen, nvml, other_pid, visible)
    print(
        f"PyTorch {seen['torch']} (CUDA {seen['torch_cuda']}) on a mock {args.profile} node, "
        f"{args.count} GPUs, driver {nvml['driver']} (CUDA {nvml['cuda'] // 1000}."
        f"{nvml['cuda'] % 1000 // 10})"
    )
    for ok, name, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    failed = sum(1 for ok, _, _ in checks if not ok)
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-python", help="an interpreter with torch installed")
    parser.add_argument("--profile", default="h100", help="GPU profile of the node (h100)")
    parser.add_argument("--count", type=int, default=8, help="GPUs on the node (8)")
    parser.add_argument("--inside", action="store_true", help="run the PyTorch half here")
    parser.add_argument("--handshake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--hold", nargs=2, type=int, metavar=("DEVICE", "BYTES"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.hold:
        hold_forever(*args.hold)
        return 0
    if args.inside:
        print(json.dumps(observe(args.handshake)))
        return 0
    if not args.torch_python:
        parser.error("--torch-python is required (or --inside, in a pod)")
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
