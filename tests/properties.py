"""Hypothesis profiles: how many examples each property test draws.

``ci`` is loaded by default and is what the README's test command runs: each property draws the number of
examples its test names (``examples(n)`` gives ``n``), the same ones every run (derandomized: a build passes or
fails on the tree alone). ``thorough`` draws ten times as many, new ones each run, for a change to the vectorized
core or to a protocol model before it lands (docs/contributing.md):

    python -m pytest -q -p no:cacheprovider -n auto -m hypothesis --hypothesis-profile=thorough tests
"""

from __future__ import annotations

from hypothesis import settings

CI_EXAMPLES = 100
"""max_examples of the ``ci`` profile (hypothesis' own default); a property's count is scaled against it."""
THOROUGH = 10
"""How many times the ``ci`` count the ``thorough`` profile draws."""
_registered = False


def register_profiles() -> None:
    """Register both profiles and load ``ci``, once: tests/conftest.py calls it before pytest's
    ``--hypothesis-profile`` option is read, so that option picks ``thorough``; a test module that imports
    ``tests.conftest`` for its helpers runs it again, which must not put ``ci`` back."""
    global _registered
    if _registered:
        return
    _registered = True
    settings.register_profile("ci", max_examples=CI_EXAMPLES, deadline=None, derandomize=True)
    settings.register_profile("thorough", max_examples=THOROUGH * CI_EXAMPLES, deadline=None)
    settings.load_profile("ci")


def examples(ci: int) -> int:
    """Examples a property draws under the loaded profile: ``ci`` under ``ci``, ten times that under
    ``thorough``. Read when the test module is imported, after pytest's ``--hypothesis-profile`` took effect."""
    return max(1, ci * settings.default.max_examples // CI_EXAMPLES)
