"""One-off extractor: a Markdown table of TypeScript cases -> typescript_cases.json.

The cases are what openai-harmony 0.0.8 prints for each tool schema; they were
written down, as a Markdown case table, in behaviour notes kept outside this
repository. typescript_cases.json is the record the tests read; this script is
kept only to show how it was made.  Usage:

    python tests/data/extract_typescript_cases.py NOTES.md

Each case records the JSON text of the tool parameters exactly as printed in
the notes (so key order and number spelling survive) and the expected
``type f = ...;`` text; where the notes give a Python repr (trailing spaces,
control characters) the repr wins over the fenced block.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

CASE = re.compile(r"^\*\*(TS-\d{3})\. (.*)\*\*$")
PARAMS = re.compile(r"^Input `parameters`: `(.*)`$")
REPR = re.compile(r"^Exact string \(Python repr[^)]*\): `(.*)`$")


def extract(spec: str) -> list[dict[str, object]]:
    start = spec.index("### 5.4 Exhaustive case table")
    end = spec.index("## 6. Parsing completions")
    lines = spec[start:end].split("\n")
    cases: list[dict[str, object]] = []
    index = 0
    while index < len(lines):
        match = CASE.match(lines[index])
        index += 1
        if not match:
            continue
        case: dict[str, object] = {"id": match.group(1), "title": match.group(2)}
        while not PARAMS.match(lines[index]):
            index += 1
        case["parameters_json"] = PARAMS.match(lines[index]).group(1)  # type: ignore[union-attr]
        while lines[index] != "```text":
            index += 1
        block_end = lines.index("```", index + 1)
        case["expected"] = "\n".join(lines[index + 1 : block_end])
        index = block_end + 1
        while index < len(lines) and not CASE.match(lines[index]):
            exact = REPR.match(lines[index])
            if exact:
                case["expected"] = ast.literal_eval(exact.group(1))
            index += 1
        cases.append(case)
    return cases


def main() -> None:
    cases = extract(Path(sys.argv[1]).read_text(encoding="utf-8"))
    for case in cases:
        json.loads(str(case["parameters_json"]))  # fail early on a bad extraction
    out = Path(__file__).with_name("typescript_cases.json")
    text = json.dumps(cases, indent=1, ensure_ascii=False)
    out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
