"""Cross-reference checks the schema cannot express: names unique, references resolve, sizes fit."""

from __future__ import annotations

import difflib

from sim.scenario.schema import Scenario

Problem = tuple[tuple, str]
"""A key path into the scenario and the reason it is wrong."""


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(choices) or 'none'})"


def _duplicates(items, section: str) -> list[Problem]:
    seen: set[str] = set()
    problems = []
    for i, item in enumerate(items):
        if item.name in seen:
            problems.append(((section, i, "name"), f"duplicate {section[:-1]} name '{item.name}'"))
        seen.add(item.name)
    return problems


def check_references(scenario: Scenario) -> list[Problem]:
    """Every broken reference in a schema-valid scenario, with the key path that holds it."""
    problems = _duplicates(scenario.nodes, "nodes") + _duplicates(scenario.buffers, "buffers")
    nodes = [n.name for n in scenario.nodes]
    buffers = {b.name: b for b in scenario.buffers}
    for i, buf in enumerate(scenario.buffers):
        node = buf.on.split(".")[0]
        if node not in nodes:
            problems.append((("buffers", i, "on"), f"no node named '{node}'{_suggest(node, nodes)}"))
    for i, work in enumerate(scenario.workload):
        ends = []
        for key, name in (("from", work.from_), ("to", work.to)):
            if name not in buffers:
                problems.append((("workload", i, key), f"no buffer named '{name}'{_suggest(name, list(buffers))}"))
            else:
                ends.append(buffers[name])
        if len(ends) == 2:
            if ends[0].on == ends[1].on:
                problems.append((("workload", i, "to"), f"'{work.from_}' and '{work.to}' are both on {ends[0].on};"
                                 " a measurement needs buffers on two different nodes"))
            largest = max(work.size_list())
            for key, buf in (("from", ends[0]), ("to", ends[1])):
                if largest > buf.size:
                    problems.append((("workload", i, "sizes"), f"message size {largest} does not fit buffer "
                                     f"'{buf.name}' ({buf.size} bytes, referenced by '{key}')"))
    return problems
