"""A small mutation runner: how many realistic bugs do the tests catch?

    python tools/mutants.py --list [NAME...]
    python tools/mutants.py --check
    python tools/mutants.py --run [NAME...] [--repo DIR] [--timeout S] [--json FILE]

A mutation (one ``[[mutant]]`` table of ``tools/mutants.toml``) names a source file, an exact
snippet of it, the snippet that replaces it, the tests that should catch the change, its area and
a description. ``--run`` copies the repository (``--repo``, default: this checkout) to a
temporary directory once, then for each mutation rewrites the one file in the COPY, runs its
tests there (``pytest -x``, one test path after the other until one fails, with a timeout) and
restores the file; the working tree is never edited. A mutation is *caught* when its tests fail
(or time out), *survived* when they pass, and *stale* when its file or snippet is not found
(exactly once) in the copied tree — the catalogue must then be updated (files moved, code
rewritten). Tests a catalogue entry names that the copied tree does not hold are left out (so
``--repo`` can point at an older checkout, e.g. before new tests were written).

``--check`` only verifies that every snippet still matches its file exactly once (exit 1 if not).

    python tools/mutants.py --sweep FILE[:FUNCTION] ... --tests PATH... [--survivors OUT.toml]

``--sweep`` generates every small operator mutation of the files given (see tools/mutant_sweep.py)
and runs the ``--tests`` on each: the survivors are the boundaries no test pins. ``--survivors``
writes them as catalogue entries. The catalogue's own snippet test
(tests/boundaries/test_mutant_catalogue.py) never runs on a mutant: it fails on any mutated copy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = Path(__file__).with_name("mutants.toml")
COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache",
                                     ".ruff_cache", ".venv*", "*.egg-info")
SELF_TEST = "tests/boundaries/test_mutant_catalogue.py"
FIELDS = ("name", "area", "file", "old", "new", "tests", "description")
OPTIONAL = ("held_out",)


@dataclass(frozen=True)
class Mutant:
    """One realistic bug: `old` replaced by `new` in `file` should fail `tests`."""

    name: str
    area: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    description: str
    held_out: bool = False
    """Written after the tests it is measured against (and no test written for it since)."""


@dataclass
class Outcome:
    """What running one mutant gave."""

    mutant: Mutant
    status: str  # caught | survived | stale | error
    detail: str = ""
    seconds: float = 0.0
    tests: list[str] = field(default_factory=list)


def load_catalogue(path: Path = CATALOGUE) -> list[Mutant]:
    """The catalogue's mutants, in file order; a malformed entry is an error naming it."""
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for i, entry in enumerate(data.get("mutant", []), 1):
        where = f"{path.name}: mutant #{i} ({entry.get('name', '?')})"
        missing = [k for k in FIELDS if k not in entry]
        unknown = sorted(set(entry) - set(FIELDS) - set(OPTIONAL))
        if missing or unknown:
            raise ValueError(f"{where}: missing keys {missing}, unknown keys {unknown}")
        if entry["old"] == entry["new"]:
            raise ValueError(f"{where}: `old` and `new` are the same")
        if entry["name"] in seen:
            raise ValueError(f"{where}: duplicate name")
        seen.add(entry["name"])
        mutants.append(Mutant(entry["name"], entry["area"], entry["file"], entry["old"], entry["new"],
                              tuple(entry["tests"]), entry["description"], bool(entry.get("held_out", False))))
    return mutants


def locate(mutant: Mutant, root: Path) -> tuple[str | None, str]:
    """The file's text if the snippet occurs exactly once in it, else None and why not."""
    path = root / mutant.file
    if not path.is_file():
        return None, f"file not found: {mutant.file}"
    text = path.read_text()
    count = text.count(mutant.old)
    if count != 1:
        what = "not found" if count == 0 else f"found {count} times"
        return None, f"snippet {what} in {mutant.file}: {mutant.old.strip()[:60]!r}"
    return text, ""


def _drop_bytecode(path: Path) -> None:
    """Remove the cached bytecode of `path` (a same-size edit within one second would reuse it)."""
    cache = path.parent / "__pycache__"
    for pyc in cache.glob(f"{path.stem}.*.pyc") if cache.is_dir() else ():
        pyc.unlink()


def _pytest(root: Path, tests: Sequence[str], timeout: float) -> tuple[int | None, str]:
    """Run pytest on `tests` in `root`; (return code or None on timeout, last output line)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(root / "src"), str(Path(__file__).parent))),
           "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "mutants_plugin",
           "--no-header", f"--ignore={SELF_TEST}", *tests]
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:g} s"
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    last = lines[-1] if lines else done.stderr.strip()[-200:]
    return done.returncode, "; ".join([*failed[:1], last])


def _staged(root: Path, tests: Sequence[str], timeout: float) -> tuple[int | None, str]:
    """Run the tests one path at a time, stopping at the first that fails (a caught mutant
    costs one path's collection, not all of them); `timeout` bounds the whole."""
    start, code, last = time.monotonic(), 0, ""
    for test in tests:
        left = timeout - (time.monotonic() - start)
        code, last = _pytest(root, [test], left) if left > 0 else (None, f"timeout after {timeout:g} s")
        if code != 0:
            break
    return code, last


def run_one(mutant: Mutant, root: Path, timeout: float) -> Outcome:
    """Apply `mutant` to the copy at `root`, run its tests, restore the file."""
    text, why = locate(mutant, root)
    if text is None:
        return Outcome(mutant, "stale", why)
    tests = [t for t in mutant.tests if (root / t.split("::")[0]).exists() and t != SELF_TEST]
    if not tests:
        return Outcome(mutant, "survived", "no test of the catalogue entry exists in this tree")
    path = root / mutant.file
    start = time.monotonic()
    try:
        path.write_text(text.replace(mutant.old, mutant.new))
        _drop_bytecode(path)
        code, last = _staged(root, tests, timeout)
    finally:
        path.write_text(text)
        _drop_bytecode(path)
    took = time.monotonic() - start
    if code is None or code == 1:
        return Outcome(mutant, "caught", last, took, tests)
    if code == 0:
        return Outcome(mutant, "survived", last, took, tests)
    return Outcome(mutant, "error", f"pytest exit {code}: {last}", took, tests)


def baseline(mutants: Sequence[Mutant], root: Path, timeout: float) -> str | None:
    """Run every selected test unmutated; the failure line if they do not all pass."""
    tests = sorted({t for m in mutants for t in m.tests if (root / t.split("::")[0]).exists()})
    if not tests:
        return None
    code, last = _pytest(root, tests, timeout * 4)
    return None if code == 0 else f"unmutated tests fail ({last}): fix them before measuring"


def summary(outcomes: Sequence[Outcome]) -> list[str]:
    """Catch rate per area, of the held-out and the other mutants, and overall (stale and
    errored mutants are not counted)."""
    lines = []
    areas = sorted({o.mutant.area for o in outcomes})
    groups: list[tuple[str, list[Outcome]]] = [(a, [o for o in outcomes if o.mutant.area == a]) for a in areas]
    groups += [("targeted", [o for o in outcomes if not o.mutant.held_out]),
               ("held-out", [o for o in outcomes if o.mutant.held_out]), ("ALL", list(outcomes))]
    for label, group in groups:
        if not group:
            continue
        judged = [o for o in group if o.status in ("caught", "survived")]
        caught = sum(o.status == "caught" for o in judged)
        rate = f"{100 * caught / len(judged):5.1f} %" if judged else "   -   "
        extra = len(group) - len(judged)
        lines.append(f"{label:<12} {caught:3d}/{len(judged):<3d} caught  {rate}"
                     + (f"  ({extra} stale/error)" if extra else ""))
    return lines


def select(mutants: list[Mutant], names: Sequence[str]) -> list[Mutant]:
    """The named mutants (all without names); an unknown name is an error."""
    if not names:
        return mutants
    by_name = {m.name: m for m in mutants}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"mutants.py: unknown mutant(s): {', '.join(unknown)} (see --list)")
    return [by_name[n] for n in names]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="list the catalogue")
    mode.add_argument("--check", action="store_true", help="verify every snippet matches its file once")
    mode.add_argument("--run", action="store_true", help="run the mutants (all, or the NAMEs given)")
    mode.add_argument("--sweep", nargs="+", metavar="FILE[:FUNCTION]",
                      help="run every operator mutation of these source files (relative to --repo)")
    ap.add_argument("--tests", nargs="+", default=[], help="with --sweep: the test paths run on each mutation")
    ap.add_argument("--survivors", type=Path, help="with --sweep: write the survivors as catalogue entries")
    ap.add_argument("names", nargs="*", metavar="NAME")
    ap.add_argument("--repo", type=Path, default=ROOT, help="checkout to copy and mutate (default: this one)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant's test run")
    ap.add_argument("--json", type=Path, help="write the outcomes to this file")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated test run")
    ap.add_argument("--only", choices=("targeted", "held-out"), help="only the mutants of that set")
    return ap


def _run(mutants: list[Mutant], args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(args.repo, root, ignore=COPY_IGNORE)
        if not args.no_baseline:
            failed = baseline(mutants, root, args.timeout)
            if failed:
                print(f"mutants.py: {failed}", file=sys.stderr)
                return 1
        outcomes = []
        for m in mutants:
            outcome = run_one(m, root, args.timeout)
            outcomes.append(outcome)
            print(f"{outcome.status:<8} {m.name:<34} {outcome.seconds:6.1f}s  {outcome.detail}", flush=True)
    print("\n".join(summary(outcomes)))
    if getattr(args, "survivors", None):
        from mutant_sweep import toml_entry

        args.survivors.write_text("\n".join(toml_entry(o.mutant) for o in outcomes if o.status == "survived"))
    if args.json:
        args.json.write_text(json.dumps([{"name": o.mutant.name, "area": o.mutant.area, "status": o.status,
                                          "detail": o.detail, "seconds": round(o.seconds, 1), "tests": o.tests}
                                         for o in outcomes], indent=1) + "\n")
    return 0


def _swept(args: argparse.Namespace) -> list[Mutant]:
    """The sweep mutants of every FILE[:FUNCTION] given (an empty --tests is an error)."""
    from mutant_sweep import sweep

    if not args.tests:
        raise SystemExit("mutants.py: --sweep needs --tests PATH...")
    found: list[Mutant] = []
    for spec in args.sweep:
        file, _, function = spec.partition(":")
        found += sweep(args.repo, file, tuple(args.tests), function or None)
    print(f"{len(found)} mutations", flush=True)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    args = _parser().parse_args(argv)
    if args.sweep:
        return _run(_swept(args), args)
    mutants = select(load_catalogue(), args.names)
    if args.only:
        mutants = [m for m in mutants if m.held_out == (args.only == "held-out")]
    if args.list:
        for m in mutants:
            print(f"{m.name:<34} {m.area:<10} {m.file}{'  (held out)' if m.held_out else ''}\n    {m.description}")
        print(f"{len(mutants)} mutants")
        return 0
    if args.check:
        stale = [(m, why) for m in mutants for text, why in [locate(m, args.repo)] if text is None]
        for m, why in stale:
            print(f"stale    {m.name}: {why}")
        print(f"{len(mutants) - len(stale)}/{len(mutants)} snippets match")
        return 1 if stale else 0
    return _run(mutants, args)


if __name__ == "__main__":
    sys.exit(main())
