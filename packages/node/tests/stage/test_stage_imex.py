"""Staging the IMEX channels: real device nodes, the substitute proc-devices, the major's choice.

The node's ``/proc/devices`` is a fake tree (``NVML_MOCK_HOST_PROC_ROOT``), so the choice of
the major and the real-driver refusal are tested against what the test writes there; the
nodes themselves are real character devices, made by ``mknod`` as root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from nvml_mock_engine.cli import main
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import StageError
from nvml_mock_engine.settings import STAGE_OPTIONS, StageSettings
from nvml_mock_node.stage import StageOptions, StageReport, proc_devices, stage
from nvml_mock_protocol import hostgpu, names
from nvml_mock_protocol import settings as s

CHANNELS = f"dev/{names.IMEX_CHANNELS_DIR}"
PROC_DEVICES = f"{names.OVERLAY_IMEX_DIR}/{names.IMEX_PROC_DEVICES_FILE}"
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating character device nodes needs root (CAP_MKNOD)"
)


def fake_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    character: str = "  1 mem\n",
    driver: bool = False,
) -> Path:
    """A fake /proc and /sys whose /proc/devices lists *character*; returns the proc root."""
    proc, sys_ = tmp_path / "host" / "proc", tmp_path / "host" / "sys"
    (sys_ / "module").mkdir(parents=True)
    proc.mkdir(parents=True)
    if driver:
        character += "195 nvidia\n"
    (proc / "devices").write_text(
        f"Character devices:\n{character}\nBlock devices:\n  7 loop\n240 blk-not-a-char\n"
    )
    monkeypatch.setenv(hostgpu.ENV_HOST_PROC_ROOT, str(proc))
    monkeypatch.setenv(hostgpu.ENV_HOST_SYS_ROOT, str(sys_))
    return proc


def staged(tmp_path: Path, library: Path, name: str = "o", **options: object) -> StageReport:
    config = resolve_config(profile="gb200", count=4, node="n")
    chosen = StageOptions(runtime=False, library=library, **options)  # type: ignore[arg-type]
    return stage(tmp_path / name, config, chosen)


def channel_numbers(directory: Path) -> dict[str, tuple[int, int, int]]:
    """``name: (major, minor, mode)`` of each entry, each checked to be a character device."""
    found = {}
    for entry in directory.iterdir():
        st = entry.lstat()
        assert stat.S_ISCHR(st.st_mode), f"{entry} is not a character device"
        found[entry.name] = (os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode))
    return found


def test_proc_devices_text_is_linux_format_sorted_by_major() -> None:
    assert proc_devices(240) == (
        "Character devices:\n"
        "195 nvidia-frontend\n"
        "240 nvidia-caps-imex-channels\n"
        "510 nvidia-uvm\n"
        "\n"
        "Block devices:\n"
    )
    assert proc_devices(1000).splitlines()[1:4] == [
        "195 nvidia-frontend",
        "510 nvidia-uvm",
        "1000 nvidia-caps-imex-channels",
    ]
    assert proc_devices(7).splitlines()[1] == "  7 nvidia-caps-imex-channels"


@ROOT_ONLY
def test_channel_nodes_and_proc_devices_under_the_first_free_major(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 240 and 241 taken by drivers; 240 as a *block* major does not count.
    fake_host(tmp_path, monkeypatch, character="  1 mem\n240 foo\n241 bar\n250 ptp\n")
    report = staged(tmp_path, library)
    assert report.imex_major == 242
    assert report.imex_channels_created == 8
    assert report.imex_refused is None
    overlay = tmp_path / "o"
    assert channel_numbers(overlay / CHANNELS) == {f"channel{i}": (242, i, 0o666) for i in range(8)}
    assert (overlay / PROC_DEVICES).read_text() == (
        "Character devices:\n"
        "195 nvidia-frontend\n"
        "242 nvidia-caps-imex-channels\n"
        "510 nvidia-uvm\n"
        "\n"
        "Block devices:\n"
    )
    assert os.readlink(overlay / "imex") == ".nvml-mock/current/imex"
    # The GPU and control nodes are there beside the channels' directory, unchanged.
    assert sorted(p.name for p in (overlay / "dev").iterdir()) == sorted(
        [names.IMEX_CHANNELS_DIR, "nvidia-caps", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"]
        + [f"nvidia{i}" for i in range(4)]
    )


@ROOT_ONLY
def test_explicit_major_and_count(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    report = staged(tmp_path, library, imex_channels=3, imex_major=3000)
    assert (report.imex_major, report.imex_channels_created) == (3000, 3)
    assert channel_numbers(tmp_path / "o" / CHANNELS) == {
        f"channel{i}": (3000, i, 0o666) for i in range(3)
    }
    assert "3000 nvidia-caps-imex-channels\n" in (tmp_path / "o" / PROC_DEVICES).read_text()


@pytest.mark.parametrize(
    ("major", "says"),
    [
        (1, "is listed in {proc}/devices as 'mem': channel nodes with it would reach"),
        (195, "is the mock's nvidia-frontend major"),
        (510, "is the mock's nvidia-uvm major"),
    ],
)
def test_explicit_major_the_node_or_the_mock_uses_is_refused_before_anything_is_written(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch, major: int, says: str
) -> None:
    proc = fake_host(tmp_path, monkeypatch)
    with pytest.raises(StageError) as caught:
        staged(tmp_path, library, imex_major=major)
    assert f"IMEX channel major {major} (--imex-major) " + says.format(proc=proc) in str(
        caught.value
    )
    assert not (tmp_path / "o").exists()


def test_auto_major_refused_when_the_whole_range_is_taken(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = "".join(f"{major:3d} drv{major}\n" for major in range(240, 255))
    proc = fake_host(tmp_path, monkeypatch, character=taken)
    good = staged(tmp_path, library, imex_channels=0)  # a last good overlay
    with pytest.raises(StageError) as caught:
        staged(tmp_path, library)
    assert str(caught.value) == (
        f"no free character major for the IMEX channels: {proc}/devices lists every major "
        "in 240..254; give one the node does not list with --imex-major, or stage no "
        "channels with --imex-channels 0"
    )
    assert os.readlink(tmp_path / "o" / ".nvml-mock" / "current") == good.generation.name
    # An explicit major outside the range still works there.
    assert staged(tmp_path, library, imex_channels=1, imex_major=600).imex_major == 600


def test_count_zero_stages_no_channels_and_no_proc_devices(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every auto major taken: with no channels asked for, no major is looked for.
    fake_host(tmp_path, monkeypatch, character="".join(f"{m} d\n" for m in range(240, 255)))
    report = staged(tmp_path, library, imex_channels=0)
    assert (report.imex_major, report.imex_channels_created, report.imex_refused) == (None, 0, None)
    assert not (tmp_path / "o" / CHANNELS).exists()
    assert list((tmp_path / "o" / "imex").iterdir()) == []


def test_no_devices_stages_no_channels(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch, driver=True)
    report = staged(tmp_path, library, devices=False)
    assert (report.imex_major, report.imex_channels_created) == (None, 0)
    assert report.imex_refused is None, "no device nodes asked for: nothing to refuse"
    assert list((tmp_path / "o" / "dev").iterdir()) == []
    assert list((tmp_path / "o" / "imex").iterdir()) == []


def test_count_out_of_range_is_a_stage_error(tmp_path: Path, library: Path) -> None:
    with pytest.raises(StageError, match=r"IMEX channel count 2049 is outside 0\.\.2048"):
        staged(tmp_path, library, imex_channels=2049)


def test_refused_on_a_node_with_a_real_driver(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = fake_host(tmp_path, monkeypatch, driver=True)
    report = staged(tmp_path, library)
    assert report.imex_refused == (
        "IMEX channel nodes refused: a real NVIDIA driver is loaded on this node "
        f"({proc}/devices lists nvidia (major 195)), and a channel major of the mock's could "
        f"be the real driver's; dev/{names.IMEX_CHANNELS_DIR}/ is not created and imex/ holds "
        "no proc-devices"
    )
    assert (report.imex_major, report.imex_channels_created) == (None, 0)
    assert report.devices_refused is not None
    assert list((tmp_path / "o" / "dev").iterdir()) == []
    assert list((tmp_path / "o" / "imex").iterdir()) == []
    assert (tmp_path / "o" / "config" / names.STATE_FILE_NAME).is_file(), "the rest is staged"


def test_cli_refusal_on_a_real_driver_node_logs_it_and_exits_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    library: Path,
) -> None:
    fake_host(tmp_path, monkeypatch, driver=True)
    overlay = tmp_path / "overlay"
    assert main(["stage", str(overlay), "--profile", "t4", "--node", "n"]) == 1
    err = capsys.readouterr().err
    assert "IMEX channel nodes refused: a real NVIDIA driver is loaded" in err
    assert os.access(overlay / "bin" / "nvidia-smi", os.X_OK), "the rest is staged"


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (
            ["--imex-channels", "-1"],
            {},
            "imex_channels: must be an integer from 0 to 2048, got '-1' (--imex-channels)",
        ),
        (
            ["--imex-channels", "eight"],
            {},
            "imex_channels: must be an integer from 0 to 2048, got 'eight' (--imex-channels)",
        ),
        (
            ["--imex-major", "0"],
            {},
            "imex_major: must be an integer from 1 to 4095, got '0' (--imex-major)",
        ),
        (
            [],
            {"NVML_MOCK_IMEX_MAJOR": "4096"},
            "imex_major: must be an integer from 1 to 4095, got '4096' (NVML_MOCK_IMEX_MAJOR)",
        ),
    ],
)
def test_cli_bad_values_exit_3(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    says: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["stage", str(tmp_path / "o"), "--profile", "t4", *argv]) == 3
    assert says in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_major_in_use_exits_1_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    library: Path,
) -> None:
    fake_host(tmp_path, monkeypatch, character="  1 mem\n250 ptp\n")
    monkeypatch.setenv("NVML_MOCK_IMEX_MAJOR", "250")
    assert main(["stage", str(tmp_path / "o"), "--profile", "t4", "--node", "n"]) == 1
    assert "IMEX channel major 250 (--imex-major) is listed in" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@ROOT_ONLY
def test_restage_changes_count_and_major_through_generations(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    first = staged(tmp_path, library, imex_channels=2)
    overlay = tmp_path / "o"
    assert sorted(channel_numbers(overlay / CHANNELS)) == ["channel0", "channel1"]
    second = staged(tmp_path, library, imex_channels=5, imex_major=300)
    assert second.generation != first.generation
    assert channel_numbers(overlay / CHANNELS) == {f"channel{i}": (300, i, 0o666) for i in range(5)}
    assert "300 nvidia-caps-imex-channels" in (overlay / PROC_DEVICES).read_text()
    # The generation just replaced keeps its own nodes for processes still on it.
    assert len(list((first.generation / CHANNELS).iterdir())) == 2
    third = staged(tmp_path, library, imex_channels=0)
    assert not first.generation.exists()
    assert not (overlay / CHANNELS).exists()
    assert not (overlay / PROC_DEVICES).exists()
    assert third.imex_major is None


@ROOT_ONLY
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_without_cap_mknod_proc_devices_is_still_written(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from nvml_mock_engine.config import resolve_config\n"
        "from nvml_mock_node.stage import StageOptions, stage\n"
        "report = stage(Path(sys.argv[1]), resolve_config(profile='t4', count=1, node='n'),\n"
        "               StageOptions(runtime=False, library=Path(sys.argv[2])))\n"
        "print(report.devices_created, report.imex_channels_created, report.imex_major)\n"
        "print('\\n'.join(report.warnings))\n"
    )
    overlay = tmp_path / "o"
    # Root without CAP_MKNOD in its bounding set: what a stager in a restricted pod gets.
    unprivileged = ["setpriv", "--bounding-set", "-mknod", "--", sys.executable, "-c", script]
    done = subprocess.run(
        [*unprivileged, str(overlay), str(library)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary, *warnings = done.stdout.splitlines()
    assert summary == "False 0 240"
    assert (
        "IMEX channel nodes not created (Operation not permitted: creating character devices "
        f"needs root with CAP_MKNOD); dev/{names.IMEX_CHANNELS_DIR}/ is not created, "
        "imex/proc-devices still names major 240"
    ) in warnings
    assert not (overlay / CHANNELS).exists()
    assert (overlay / PROC_DEVICES).read_text() == proc_devices(240)


@pytest.mark.parametrize(
    ("flag", "env", "major"),
    [
        (None, {}, None),
        ("auto", {}, None),
        ("AUTO", {}, None),
        (None, {"NVML_MOCK_IMEX_MAJOR": ""}, None),
        (None, {"NVML_MOCK_IMEX_MAJOR": "244"}, 244),
        ("245", {"NVML_MOCK_IMEX_MAJOR": "244"}, 245),
    ],
)
def test_imex_major_setting_auto_env_and_flag(
    flag: str | None, env: dict[str, str], major: int | None
) -> None:
    args = argparse.Namespace(imex_major=flag)
    settings = s.resolve(StageSettings, STAGE_OPTIONS, args, env, dir=Path("d"))
    assert (settings.imex_major, settings.imex_channels) == (major, 8)
