"""A small GBNF reader for tests: recognise a string, or write a random one, by the grammar.

It reads what harmonia writes for llama.cpp (rules ``name ::= body``; literals,
character classes with ``\\xHH``/``\\uHHHH`` escapes, rule names, groups, ``|`` and
``* + ? {m} {m,} {m,n}``), character by character as llama.cpp does. Recognition
keeps, for each item and start, the set of positions it can end at, so it handles
ambiguity and recursion that is not left recursion. Much faster than compiling the
grammar for a tokenizer, so property tests can run hundreds of grammars.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

Node = tuple[Any, ...]
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
#: Characters a class may produce when written at random (a class is a set of ranges).
_POOL = [chr(c) for c in [*range(0x20, 0x7F), 0xE9, 0x20AC, 0x4E2D, 0x1F600]]


class Grammar:
    def __init__(self, text: str) -> None:
        self.rules: dict[str, Node] = {}
        for line in text.splitlines():
            if line.strip():
                name, _, body = line.partition("::=")
                self.rules[name.strip()] = _Parser(body.strip()).parse()

    # -- recognising --------------------------------------------------------------------

    def accepts(self, text: str, start: str = "root") -> bool:
        @functools.cache
        def ends(node: Node, at: int) -> frozenset[int]:
            kind = node[0]
            if kind == "lit":
                return (
                    frozenset({at + len(node[1])}) if text.startswith(node[1], at) else frozenset()
                )
            if kind == "class":
                return (
                    frozenset({at + 1})
                    if at < len(text) and _in_class(node, text[at])
                    else frozenset()
                )
            if kind == "ref":
                return ends(self.rules[node[1]], at)
            if kind == "alt":
                return frozenset().union(*(ends(branch, at) for branch in node[1]))
            if kind == "seq":
                positions = frozenset({at})
                for item in node[1]:
                    positions = frozenset().union(*(ends(item, p) for p in positions))
                return positions
            _, item, low, high = node  # rep
            found = set() if low else {at}
            current, seen, count = {at}, {at}, 0
            while current and (high is None or count < high):
                count += 1
                current = set().union(*(ends(item, p) for p in current))
                if count >= low:
                    found |= current
                if high is None:
                    current -= seen  # an unbounded repeat: new positions only
                    seen |= current
            return frozenset(found)

        return len(text) in ends(self.rules[start], 0)

    # -- writing --------------------------------------------------------------------------

    def sample(self, rng: random.Random, start: str = "root") -> str:
        out: list[str] = []

        def write(node: Node, depth: int) -> None:
            kind = node[0]
            if kind == "lit":
                out.append(node[1])
            elif kind == "class":
                choices = [c for c in _POOL if _in_class(node, c)]
                out.append(rng.choice(choices or [_first(node)]))
            elif kind == "ref":
                write(self.rules[node[1]], depth + 1)
            elif kind == "alt":
                branches = node[1]
                if depth > 12:  # deep in a recursive rule: take the shallowest way out
                    branches = [min(branches, key=lambda b: str(b).count("'ref'"))]
                write(rng.choice(branches), depth)
            elif kind == "seq":
                for item in node[1]:
                    write(item, depth)
            else:
                _, item, low, high = node
                most = low + (0 if depth > 12 else 3)
                for _ in range(rng.randint(low, most if high is None else min(high, most))):
                    write(item, depth + 1)

        write(self.rules[start], 0)
        return "".join(out)


def _in_class(node: Node, char: str) -> bool:
    _, negated, ranges = node
    code = ord(char)
    return any(a <= code <= b for a, b in ranges) != negated


def _first(node: Node) -> str:
    _, negated, ranges = node
    if not negated:
        return chr(ranges[0][0])
    return next(c for c in map(chr, range(0x20, 0x3000)) if _in_class(node, c))


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def parse(self) -> Node:
        node = self.alternatives()
        assert self.at == len(self.text), f"cannot read {self.text[self.at :]!r}"
        return node

    def skip(self) -> None:
        while self.at < len(self.text) and self.text[self.at] == " ":
            self.at += 1

    def alternatives(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", tuple(branches))

    def peek(self) -> str:
        self.skip()
        return self.text[self.at] if self.at < len(self.text) else ""

    def sequence(self) -> Node:
        items = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.postfix(self.atom()))
        return ("seq", tuple(items))

    def atom(self) -> Node:
        char = self.text[self.at]
        if char == "(":
            self.at += 1
            node = self.alternatives()
            assert self.peek() == ")"
            self.at += 1
            return node
        if char == '"':
            self.at += 1
            chars = []
            while self.text[self.at] != '"':
                chars.append(self.char())
            self.at += 1
            return ("lit", "".join(chars))
        if char == "[":
            self.at += 1
            negated = self.text[self.at] == "^"
            self.at += negated
            ranges = []
            while self.text[self.at] != "]":
                low = ord(self.char())
                high = low
                if self.text[self.at] == "-" and self.text[self.at + 1] != "]":
                    self.at += 1
                    high = ord(self.char())
                ranges.append((low, high))
            self.at += 1
            return ("class", negated, tuple(ranges))
        match = re.compile(r"[A-Za-z0-9-]+").match(self.text, self.at)
        assert match, f"cannot read {self.text[self.at :]!r}"
        self.at = match.end()
        return ("ref", match.group())

    def char(self) -> str:
        char = self.text[self.at]
        self.at += 1
        if char != "\\":
            return char
        code = self.text[self.at]
        self.at += 1
        if code in "xu":
            width = 2 if code == "x" else 4
            value = int(self.text[self.at : self.at + width], 16)
            self.at += width
            return chr(value)
        return _ESCAPES[code]

    def postfix(self, node: Node) -> Node:
        while self.at < len(self.text) and self.text[self.at] in "*+?{":
            char = self.text[self.at]
            self.at += 1
            if char == "{":
                close = self.text.index("}", self.at)
                numbers = self.text[self.at : close].split(",")
                self.at = close + 1
                low = int(numbers[0])
                high = low if len(numbers) == 1 else int(numbers[1]) if numbers[1] else None
            else:
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
            node = ("rep", node, low, high)
        return node
