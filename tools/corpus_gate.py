"""Run the reference corpus checker and accept exactly the documented deviations.

``../shared/golden/check_corpus.py`` scores harmonia against the reference's
own outputs and exits 0 only at 100%. Where harmonia differs from the reference
on purpose (each case is listed, with its reason, in
``tests/data/corpus_deviations.json``), that case fails there. This gate runs
the checker, reads its report (``FAIL kind: n`` and up to five case ids per
kind) and passes only when every failure is a listed deviation and every listed
deviation still fails (a stale entry is an error too).

Usage: ``python tools/corpus_gate.py CHECKER CORPUS`` (the Makefile's
``corpus`` target runs it once per BPE engine).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DEVIATIONS = Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus_deviations.json"
# The checker lists at most this many case ids under each FAIL line.
_LISTED = 5


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    checker, corpus = argv[1], argv[2]
    allowed: dict[str, dict[str, str]] = json.loads(DEVIATIONS.read_text(encoding="utf-8"))
    run = subprocess.run(
        [sys.executable, checker, corpus], capture_output=True, text=True, check=False
    )
    report = run.stdout
    print("\n".join(report.splitlines()[-15:]))
    if not re.search(r"^score: \d+/\d+$", report, re.M):
        print(f"corpus gate: the checker gave no score (exit {run.returncode})\n{run.stderr}")
        return 1
    failures: dict[str, list[str]] = {}
    kind = None
    for line in report.splitlines():
        head = re.match(r"FAIL (\S+): (\d+)$", line)
        if head:
            kind = head.group(1)
            failures[kind] = []
            if int(head.group(2)) > _LISTED:
                print(f"corpus gate: {head.group(2)} failures of kind {kind}")
                return 1
        elif kind is not None and line.startswith("    "):
            failures[kind].append(line.split()[0].split("#")[0])
    problems = [
        f"{kind}: {case} is not a documented deviation"
        for kind, cases in failures.items()
        for case in cases
        if kind not in allowed.get(case, {})
    ]
    problems += [
        f"{kind}: {case} is listed as a deviation but now passes: remove it"
        for case, kinds in allowed.items()
        for kind in kinds
        if case not in failures.get(kind, [])
    ]
    for problem in problems:
        print("corpus gate:", problem)
    deviations = sum(len(cases) for cases in failures.values())
    print(f"corpus gate: {'FAILED' if problems else 'ok'} ({deviations} documented deviations)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
