"""The merge_reuse acceleration (:attr:`sim.fast.Speedups.merge_reuse`): a shared server's merged service order is
reused when a later position of the pass serves the same claims, and its claims joined end to end are patched, not
joined again, where only a few positions' claims changed (:meth:`sim.fast.block_pass.Pass._merge`)."""

from __future__ import annotations

import numpy as np

from sim.fast.merge import Claims, Joined, per_claim


def same_parts(old: list, new: list, rec) -> bool:
    """Whether ``new`` holds the same claims as ``old``, ``rec`` (a position's record) standing in for a guess it
    equals."""
    return len(old) == len(new) and all(a is b or (b is rec and not isinstance(a, Claims) and rec.same_inputs(a))
                                        for a, b in zip(old, new))


def rejoined(joined: Joined, parts: list) -> Joined | None:
    """The same join as ``joined`` for ``parts``, which differ from its parts only in a few parts of the same
    lengths: the fields built so far are copied and those parts' claims written over them; None where the parts'
    lengths differ or more than a quarter of the parts changed (then a new join is about as cheap)."""
    changed = [k for k, (old, new) in enumerate(zip(joined.parts, parts)) if old is not new]
    if len(parts) != len(joined.parts) or 4 * len(changed) > len(parts) or any(
            len(parts[k].wake) != joined.lengths[k] for k in changed):
        return None
    out = Joined(parts)
    ends = np.cumsum(joined.lengths)
    for name, field in joined.built.items():
        field = out.built[name] = field.copy()
        for k in changed:
            field[ends[k] - joined.lengths[k]:ends[k]] = per_claim(parts[k], name)
    return out
