"""Subscription masks: event bits as containerd numbers them, and back."""

from __future__ import annotations

import pytest
from nvml_mock_protocol.nri import (
    STATE_CHANGE_EVENTS,
    VALID_EVENTS,
    VALID_EVENTS_V0_8,
    Event,
    event_mask,
    events_in_mask,
)


def test_bits_follow_the_event_numbers() -> None:
    assert Event.RUN_POD_SANDBOX.bit == 0x1
    assert Event.CREATE_CONTAINER.bit == 0x8
    assert Event.REMOVE_CONTAINER.bit == 0x400
    assert Event.VALIDATE_CONTAINER_ADJUSTMENT.bit == 0x2000
    assert event_mask(e for e in Event if e is not Event.UNKNOWN) == VALID_EVENTS
    assert event_mask(e for e in Event if 0 < e <= Event.REMOVE_CONTAINER) == VALID_EVENTS_V0_8


def test_a_mask_round_trips_and_zero_means_every_event() -> None:
    chosen = {Event.CREATE_CONTAINER, Event.STOP_CONTAINER, Event.REMOVE_POD_SANDBOX}
    assert events_in_mask(event_mask(chosen)) == chosen
    assert events_in_mask(event_mask(STATE_CHANGE_EVENTS)) == STATE_CHANGE_EVENTS
    assert events_in_mask(0) == frozenset(Event) - {Event.UNKNOWN}
    assert event_mask([]) == 0


def test_unknown_cannot_be_subscribed_to() -> None:
    with pytest.raises(ValueError, match="UNKNOWN"):
        event_mask([Event.CREATE_CONTAINER, Event.UNKNOWN])
