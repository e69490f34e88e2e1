"""The event schedulers: one per event class of the scenario schema."""

import typing

from sim.engine.events import SCHEDULERS
from sim.scenario.events import Event


def test_every_event_class_of_the_schema_has_a_scheduler():
    union = typing.get_args(Event)[0]
    assert set(SCHEDULERS) == set(typing.get_args(union))
