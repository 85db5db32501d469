"""Pure formatting and parsing pieces of the work-alike, without a library."""

from __future__ import annotations

import pytest
from nvml_mock_smi._errors import SmiError
from nvml_mock_smi._fields import Ctx, Field, NotAvailableError, lookup
from nvml_mock_smi._generation import parse_driver_version
from nvml_mock_smi._layout import GPU, dtd
from nvml_mock_smi._nvml import NvmlError
from nvml_mock_smi._options import ENV_LIBRARY, parse
from nvml_mock_smi._processes import ProcessRow
from nvml_mock_smi._table import process_table
from nvml_mock_smi._text import line
from nvml_mock_smi._topology import cpu_list
from nvml_mock_smi._tree import Node, group, leaf
from nvml_mock_smi._values import cuda_version, fabric_uuid
from nvml_mock_smi._xml import render as xml_render


def test_parse_modes_and_values() -> None:
    assert parse([], {}).mode == "table"
    assert parse(["-L"], {}).mode == "list"
    opts = parse(["-q", "-x", "--id=0, 3", "-d", "memory,ecc"], {})
    assert (opts.mode, opts.xml, opts.ids, opts.display) == (
        "query",
        True,
        ("0", "3"),
        ("MEMORY", "ECC"),
    )
    opts = parse(["--query-gpu=name,uuid", "--format=csv,noheader,nounits", "-i", "1"], {})
    assert (opts.mode, opts.query_fields, opts.csv_header, opts.csv_units, opts.ids) == (
        "query-gpu",
        ("name", "uuid"),
        False,
        False,
        ("1",),
    )
    assert parse(["topo", "--matrix"], {}).mode == "topo"
    assert parse(["nvlink", "--status", "-i", "0"], {}).mode == "nvlink-status"
    assert parse(["nvlink", "-c"], {}).mode == "nvlink-caps"


def test_parse_loop_and_library_precedence() -> None:
    assert parse(["-L", "-l"], {}).loop_seconds == 5.0
    assert parse(["-L", "-l", "2"], {}).loop_seconds == 2.0
    assert parse(["-L", "--loop-ms=250"], {}).loop_seconds == 0.25
    assert parse(["-L"], {ENV_LIBRARY: "/env/lib.so"}).library == "/env/lib.so"
    assert (
        parse(["-L", "--nvml-lib", "/flag/lib.so"], {ENV_LIBRARY: "/env/lib.so"}).library
        == "/flag/lib.so"
    )


@pytest.mark.parametrize(
    "argv",
    [["-L", "-L", "-q"], ["--id"], ["-i", "0", "-i", "1"], ["-l", "x", "-L"], ["--format=csv"]],
)
def test_parse_rejects(argv: list[str]) -> None:
    with pytest.raises(SmiError) as info:
        parse(argv, {})
    assert info.value.exit_code == 2


def test_text_key_column() -> None:
    assert line(0, "Driver Version", "580.65.06").index(":") == 55
    assert line(8, "SRAM Correctable", "0").index(":") == 55
    assert line(8, "Process ID", "42", 42).index(":") == 42
    long_label = "x" * 60
    assert line(4, long_label, "v") == "    " + long_label + ": v"


def test_xml_layout() -> None:
    nodes = [
        leaf("product_name", "Product Name", "A & <B>"),
        Node("mig_devices", None, raw="None"),
        Node("processes", "Processes", children=[]),
        group("fb_memory_usage", "FB Memory Usage", [leaf("total", "Total", "1 MiB")]),
    ]
    header = [leaf("driver_version", None, "580.65.06")]
    out = xml_render(header, [("00000000:01:00.0", nodes)], "nvsmi_device_v13.dtd")
    assert out == (
        '<?xml version="1.0" ?>\n'
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n'
        "<nvidia_smi_log>\n"
        "\t<driver_version>580.65.06</driver_version>\n"
        '\t<gpu id="00000000:01:00.0">\n'
        "\t\t<product_name>A &amp; &lt;B&gt;</product_name>\n"
        "\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n"
        "\t\t<processes>\n\t\t</processes>\n"
        "\t\t<fb_memory_usage>\n\t\t\t<total>1 MiB</total>\n\t\t</fb_memory_usage>\n"
        "\t</gpu>\n"
        "\n"
        "</nvidia_smi_log>\n"
    )


def test_process_table_rows_are_91_columns() -> None:
    rows = [
        (0, ProcessRow(1234, "C", "python3", used=512 * 1048576, gi="N/A", ci="N/A")),
        (
            7,
            ProcessRow(
                99999999,
                "C+G",
                "/very/long/path/to/some/training/binary/with/a/long/name",
                used=None,
                gi="1",
                ci="0",
            ),
        ),
    ]
    out = process_table(rows)
    assert all(len(row) == 91 for row in out)
    assert out[5].split() == ["|", "0", "N/A", "N/A", "1234", "C", "python3", "512MiB", "|"]
    assert "...ining/binary/with/a/long/name" in out[6]
    assert out[6].split()[-2] == "N/A"
    empty = process_table([])
    assert empty[5] == "|  No running processes found" + " " * 61 + "|"


def test_driver_generations() -> None:
    assert parse_driver_version("580.105.08") == (580, 105, 8)
    assert parse_driver_version("garbage") == (9999,)
    old, mid, late, new = (
        parse_driver_version(v) for v in ("570.148.08", "580.105.08", "580.173.02", "595.91.07")
    )
    assert (dtd(old), dtd(mid), dtd(new)) == (
        "nvsmi_device_v12.dtd",
        "nvsmi_device_v13.dtd",
        "nvsmi_device_v13.dtd",
    )
    entries = {e.tag: e for e in GPU}
    pdi, edpp = entries["pdi"], entries["edpp_multiplier"]
    inactive = next(
        e for e in entries["remapped_rows"].children or () if e.tag.endswith("corr_inactive")
    )
    assert (pdi.shown(old, frozenset()), pdi.shown(mid, frozenset())) == (False, True)
    assert (inactive.shown(mid, frozenset()), inactive.shown(late, frozenset())) == (False, True)
    assert (edpp.shown(late, frozenset()), edpp.shown(new, frozenset())) == (False, True)


def test_small_formatters() -> None:
    assert cuda_version(12080) == "12.8"
    assert cuda_version(13000) == "13.0"
    assert (
        fabric_uuid(bytes.fromhex("00000001000000000000000000000001"))
        == "00000001-0000-0000-0000-000000000001"
    )
    assert cpu_list([0xFF, 0]) == "0-7"
    assert cpu_list([(1 << 64) - 1, 0b1011]) == "0-65,67"
    assert cpu_list([0]) == "N/A"


def test_field_cells_for_errors() -> None:
    def raise_not_supported(_: Ctx) -> int:
        raise NvmlError(3, "Not Supported")

    def raise_lost(_: Ctx) -> int:
        raise NvmlError(15, "GPU is lost")

    def raise_unavailable(_: Ctx) -> int:
        raise NotAvailableError

    ctx = Ctx.__new__(Ctx)
    assert Field(("a",), "W", raise_not_supported, "").cell(ctx, True) == "[N/A]"
    assert Field(("a",), "W", raise_lost, "").cell(ctx, True) == "[GPU is lost]"
    assert Field(("a",), "W", raise_unavailable, "").cell(ctx, False) == "[N/A]"
    assert Field(("a",), "W", lambda c: "1.50", "").cell(ctx, True) == "1.50 W"
    assert Field(("a",), "W", lambda c: "1.50", "").cell(ctx, False) == "1.50"
    memory = lookup("  Memory.Total ")
    assert (
        memory is not None
        and memory.header(True) == "memory.total [MiB]"
        and memory.header(False) == "memory.total"
    )
    assert lookup("clocks.gr") is lookup("clocks.current.graphics")
    assert lookup("not.a.field") is None


def test_every_architecture_a_profile_may_name_prints_by_name() -> None:
    from nvml_mock_engine.profiles import ARCHITECTURES as PROFILE_ARCHITECTURES
    from nvml_mock_smi._values import ARCHITECTURES

    for name, value in PROFILE_ARCHITECTURES.items():
        assert ARCHITECTURES[value].lower().startswith(name), (name, value)
