"""Generate every small operator mutation of a source file, as catalogue-style mutants.

Used by `tools/mutants.py --sweep FILE[:FUNCTION] --tests PATH...`: each comparison flipped at its
boundary (`<` ↔ `<=`, `>` ↔ `>=`, `==` ↔ `!=`), `+` ↔ `-`, `//` → `/`, `and` ↔ `or`, `min` ↔ `max`,
`ceil` ↔ `floor`, `True` ↔ `False`, a dropped `not`, and each integer literal plus one. Every
mutant's `old` is the smallest run of whole lines ending at the mutated line that occurs once in the
file, so a survivor can be pasted into `tools/mutants.toml` as it is.
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
from collections.abc import Iterator
from pathlib import Path

from mutants import Mutant

OPERATOR_SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+",
                  "//": "/", "+=": "-=", "-=": "+="}
NAME_SWAPS = {"and": "or", "or": "and", "min": "max", "max": "min", "ceil": "floor", "floor": "ceil",
              "True": "False", "False": "True"}


def function_lines(source: str, name: str) -> tuple[int, int]:
    """The first and last line of function `name` (`f` or `Class.f`); an unknown name is an error."""
    tree = ast.parse(source)
    found: list[tuple[int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if name in (qualname, child.name) and not isinstance(child, ast.ClassDef):
                    found.append((child.lineno, child.end_lineno or child.lineno))
                visit(child, f"{qualname}.")

    visit(tree, "")
    if not found:
        raise SystemExit(f"mutants.py: no function {name!r} in the file")
    return found[0]


def _replacements(tokens: list[tokenize.TokenInfo]) -> Iterator[tuple[tokenize.TokenInfo, str]]:
    """(token, replacement text) for every mutation of the token stream."""
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1].string if i else ""
        nxt = tokens[i + 1].string if i + 1 < len(tokens) else ""
        if tok.type == tokenize.OP and tok.string in OPERATOR_SWAPS:
            yield tok, OPERATOR_SWAPS[tok.string]
        elif tok.type == tokenize.NAME and tok.string in NAME_SWAPS:
            yield tok, NAME_SWAPS[tok.string]
        elif tok.type == tokenize.NAME and tok.string == "not" and prev != "is" and nxt != "in":
            yield tok, ""
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            yield tok, str(int(tok.string) + 1)


def _unique_snippet(lines: list[str], row: int, text: str) -> int:
    """The first line index of the smallest block of lines ending at `row` found once in `text`."""
    start = row
    while start > 0 and text.count("".join(lines[start:row + 1])) != 1:
        start -= 1
    return start


def sweep(repo: Path, file: str, tests: tuple[str, ...], function: str | None = None) -> list[Mutant]:
    """Every operator mutation of `file` (inside `function` when given) as a Mutant."""
    text = (repo / file).read_text()
    lines = text.splitlines(keepends=True)
    first, last = function_lines(text, function) if function else (1, len(lines))
    mutants: list[Mutant] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for tok, new in _replacements(tokens):
        (row, col), (end_row, end_col) = tok.start, tok.end
        if row != end_row or not first <= row <= last:
            continue
        line = lines[row - 1]
        replacement = new if new or tok.string != "not" else ""
        cut_end = end_col + 1 if tok.string == "not" and line[end_col:end_col + 1] == " " else end_col
        mutated = line[:col] + replacement + line[cut_end:]
        start = _unique_snippet(lines, row - 1, text)
        old = "".join(lines[start:row])
        mutants.append(Mutant(f"sweep:{file}:{row}:{col}:{tok.string}->{new or 'drop'}", "sweep", file,
                              old, old[:len(old) - len(line)] + mutated, tests,
                              f"line {row}: `{line.strip()}` with {tok.string!r} -> {new or 'dropped'!r}"))
    return mutants


def toml_entry(mutant: Mutant) -> str:
    """`mutant` as a `[[mutant]]` table for tools/mutants.toml (name and area to be edited); every
    string is a TOML basic string (JSON's escapes are TOML's), so backslashes and quotes survive."""
    def q(text: str) -> str:
        return json.dumps(text, ensure_ascii=False)

    tests = ", ".join(q(t) for t in mutant.tests)
    return (f"[[mutant]]\nname = {q(mutant.name.replace(':', '-'))}\narea = {q(mutant.area)}\n"
            f"file = {q(mutant.file)}\nold = {q(mutant.old)}\nnew = {q(mutant.new)}\ntests = [{tests}]\n"
            f"description = {q(mutant.description)}\n")
