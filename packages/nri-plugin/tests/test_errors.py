"""The error tree: one base, drawn once in the errors module, no name shared with protocol."""

from __future__ import annotations

import inspect

import nvml_mock_protocol.topology
from nvml_mock_nri import errors, identity


def _classes() -> dict[str, type[BaseException]]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == errors.__name__
    }


def test_every_error_derives_from_the_base_and_is_drawn_in_the_tree() -> None:
    classes = _classes()
    assert {"NriPluginError", "ConfigError", "IdentityError"} <= set(classes)
    tree = (errors.__doc__ or "").split("::", 1)[1]
    for name, cls in classes.items():
        assert issubclass(cls, errors.NriPluginError), name
        assert name in tree, f"{name} is missing from the tree in the errors module docstring"
    assert sorted(errors.__all__) == sorted(classes)


def test_identity_failures_are_not_the_protocols_topology_error() -> None:
    # protocol's TopologyError means "invalid topology document"; a failed identity
    # request is something else and must not share its name.
    assert not hasattr(identity, "TopologyError")
    assert identity.IdentityError is errors.IdentityError
    assert not issubclass(errors.IdentityError, nvml_mock_protocol.topology.TopologyError)
    failure = errors.IdentityError("timeout", "http://t/v1/nodes/a/identity: timed out")
    assert failure.kind == "timeout" and isinstance(failure, errors.NriPluginError)
