"""Every NRI message survives encode/decode, and so do fields we do not model."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri import ttrpc_pb2
from nvml_mock_protocol.nri.events import Event

ALL_MESSAGES = sorted(
    [
        *api.DESCRIPTOR.message_types_by_name.values(),
        *ttrpc_pb2.DESCRIPTOR.message_types_by_name.values(),
    ],
    key=lambda d: d.full_name,
)


def _scalar(field: FieldDescriptor, seed: int) -> object:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return f"{field.name}-{seed}-ü"
    if t == FieldDescriptor.TYPE_BYTES:
        return bytes([seed % 256, 0, 255])
    if t == FieldDescriptor.TYPE_BOOL:
        return True
    if t == FieldDescriptor.TYPE_ENUM:
        values = field.enum_type.values
        return values[-1].number
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64):
        return -(seed + 2)
    return seed + 7  # unsigned


def populate(message: Message, depth: int = 0, seed: int = 1) -> Message:
    """Set every field of ``message`` (recursively, bounded depth) to a non-default value."""
    descriptor: Descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        seed += 1
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if is_map:
            value_field = field.message_type.fields_by_name["value"]
            container = getattr(message, field.name)
            key = f"k{seed}" if field.message_type.fields_by_name["key"].type == 9 else seed
            if value_field.message_type is not None:
                if depth < 3:
                    populate(container[key], depth + 1, seed)
            else:
                container[key] = _scalar(value_field, seed)
        elif field.message_type is not None:
            if depth >= 3:
                continue
            if field.label == FieldDescriptor.LABEL_REPEATED:
                populate(getattr(message, field.name).add(), depth + 1, seed)
                populate(getattr(message, field.name).add(), depth + 1, seed + 100)
            else:
                populate(getattr(message, field.name), depth + 1, seed)
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            getattr(message, field.name).extend([_scalar(field, seed), _scalar(field, seed + 1)])
        else:
            setattr(message, field.name, _scalar(field, seed))
    return message


@pytest.mark.parametrize("descriptor", ALL_MESSAGES, ids=lambda d: d.full_name)
def test_every_message_round_trips(descriptor: Descriptor) -> None:
    cls = api if descriptor.file is api.DESCRIPTOR else ttrpc_pb2
    message_cls = getattr(cls, descriptor.name)
    original = populate(message_cls())
    encoded = original.SerializeToString()
    decoded = message_cls.FromString(encoded)
    assert decoded == original
    assert decoded.SerializeToString(deterministic=True) == original.SerializeToString(
        deterministic=True
    )
    if descriptor.fields:
        assert encoded  # populate really set something


def test_wire_service_and_package_names() -> None:
    assert api.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"
    assert api.DESCRIPTOR.services_by_name["Runtime"].full_name == "nri.pkg.api.v1alpha1.Runtime"
    plugin = api.DESCRIPTOR.services_by_name["Plugin"]
    assert plugin.full_name == "nri.pkg.api.v1alpha1.Plugin"
    assert {"Configure", "Synchronize", "CreateContainer", "UpdateContainer", "StopContainer",
            "StateChange", "Shutdown"} <= set(plugin.methods_by_name)  # fmt: skip


@pytest.mark.parametrize(
    ("message", "field", "number"),
    [
        ("RegisterPluginRequest", "plugin_idx", 2),
        ("ConfigureRequest", "request_timeout", 5),
        ("ConfigureResponse", "events", 2),
        ("SynchronizeRequest", "more", 3),
        ("PodSandbox", "namespace", 4),
        ("PodSandbox", "ips", 10),
        ("Container", "env", 8),
        ("Container", "CDI_devices", 20),
        ("Container", "image", 22),
        ("ContainerAdjustment", "annotations", 2),
        ("ContainerAdjustment", "CDI_devices", 8),
        ("ContainerAdjustment", "args", 9),
        ("LinuxContainerAdjustment", "namespaces", 7),
        ("LinuxDevice", "file_mode", 5),
        ("Hooks", "poststop", 6),
        ("StateChangeEvent", "container", 3),
    ],
)
def test_field_numbers_match_containerd(message: str, field: str, number: int) -> None:
    assert getattr(api, message).DESCRIPTOR.fields_by_name[field].number == number


def test_event_enum_matches_wire_enum() -> None:
    for event in Event:
        assert api.Event.Value(event.name) == event.value


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = (number << 3) | wire_type
    out = bytearray()
    while key >= 0x80:
        out.append((key & 0x7F) | 0x80)
        key >>= 7
    out.append(key)
    if wire_type == 2:
        out.append(len(payload))
    return bytes(out) + payload


def test_unmodelled_fields_survive_a_round_trip() -> None:
    # LinuxContainerAdjustment.seccomp_policy (6) and memory_policy (12), plus a field
    # from a future NRI (99), inside a ContainerAdjustment inside a CreateContainerResponse.
    seccomp = _field(1, 2, b"SCMP_ACT_ERRNO")
    linux = (
        _field(3, 2, b"/kubepods/x")  # cgroups_path, modelled
        + _field(6, 2, seccomp)
        + _field(12, 2, _field(2, 2, b"0-1"))
        + _field(99, 0, b"\x2a")
    )
    adjust = _field(6, 2, linux) + _field(4, 2, _field(1, 2, b"FOO") + _field(2, 2, b"bar"))
    wire = _field(1, 2, adjust)
    response = api.CreateContainerResponse.FromString(wire)
    assert response.adjust.linux.cgroups_path == "/kubepods/x"
    assert response.adjust.env[0].key == "FOO"
    response.adjust.env[0].value = "baz"  # edit a modelled field
    again = api.CreateContainerResponse.FromString(response.SerializeToString())
    raw_linux = again.adjust.linux.SerializeToString()
    assert _field(6, 2, seccomp) in raw_linux
    assert _field(12, 2, _field(2, 2, b"0-1")) in raw_linux
    assert _field(99, 0, b"\x2a") in raw_linux
    assert again.adjust.env[0].value == "baz"


def test_unknown_container_fields_reach_the_next_plugin_unchanged() -> None:
    # LinuxContainer.seccomp_profile (7) and scheduler (11) are not modelled.
    linux = _field(7, 2, _field(2, 2, b"profile")) + _field(11, 2, _field(2, 0, b"\x05"))
    container = api.Container.FromString(_field(1, 2, b"ctr") + _field(11, 2, linux))
    request = api.CreateContainerRequest(container=container)
    echoed = api.CreateContainerRequest.FromString(request.SerializeToString())
    assert linux in echoed.container.linux.SerializeToString()
