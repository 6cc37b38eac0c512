"""A stand-in for quicktok's build, for the tests of the tiered engine.

A plain module (imported as ``quicktok_build``: pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

from harmonia._tokenizer import auto_engine, registry

QUICK = registry.get_engine("quicktok")


class CountingBuild:
    """Stands in for quicktok's build: counts its calls, and fails each one if ``fail``.

    It fails with ``error`` (any exception: the tiered engine keeps encoding in
    Python whatever the build raises) and the text ``no tables today``.
    """

    def __init__(self, fail: bool = False, error: type[Exception] = OSError) -> None:
        self.calls = 0
        self.fail = fail
        self.error = error

    def __call__(self) -> auto_engine.BpeEngine:
        self.calls += 1
        if self.fail:
            raise self.error("no tables today")
        return QUICK
