"""tools/mutants.py stays usable: every catalogue snippet still matches its source file exactly
once (a moved file or rewritten line fails here, naming the entry), every test it names exists,
the catalogue covers every area; and the runner mutates only a copy, calling a failing test run
caught and a passing one survived."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AREAS = {"scheduler", "kv", "replay", "router", "planner", "report", "recommend", "calibrate", "traces"}


def _tool():
    spec = importlib.util.spec_from_file_location("mutants_tool", ROOT / "tools" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


mutants = _tool()
CATALOGUE = mutants.load_catalogue()


@pytest.mark.parametrize("mutant", CATALOGUE, ids=[m.name for m in CATALOGUE])
def test_the_snippet_matches_its_file_once(mutant):
    text, why = mutants.locate(mutant, ROOT)
    assert text is not None, f"{mutant.name}: {why} (update tools/mutants.toml)"
    for test in mutant.tests:
        assert (ROOT / test).exists(), f"{mutant.name}: no test path {test}"


def test_the_catalogue_covers_every_area():
    assert len(CATALOGUE) >= 40
    assert {m.area for m in CATALOGUE} == AREAS
    assert all(sum(m.area == area for m in CATALOGUE) >= 3 for area in AREAS)


def _tiny_repo(root: Path) -> None:
    (root / "src" / "tiny").mkdir(parents=True)
    (root / "src" / "tiny" / "__init__.py").write_text("")
    (root / "src" / "tiny" / "limit.py").write_text("def within(x, bound):\n    return x <= bound\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_limit.py").write_text(
        "from tiny.limit import within\n\n\ndef test_bound_is_inclusive():\n    assert within(3, 3)\n")


def test_the_runner_mutates_a_copy_and_judges_by_the_tests(tmp_path):
    _tiny_repo(tmp_path)
    original = (tmp_path / "src/tiny/limit.py").read_text()
    caught = mutants.Mutant("strict", "x", "src/tiny/limit.py", "x <= bound", "x < bound", ("tests",), "")
    survived = mutants.Mutant("same", "x", "src/tiny/limit.py", "x <= bound", "bound >= x", ("tests",), "")
    stale = mutants.Mutant("gone", "x", "src/tiny/limit.py", "x == bound", "x != bound", ("tests",), "")
    assert mutants.run_one(caught, tmp_path, 60).status == "caught"
    assert (tmp_path / "src/tiny/limit.py").read_text() == original, "the file is restored"
    assert mutants.run_one(survived, tmp_path, 60).status == "survived"
    outcome = mutants.run_one(stale, tmp_path, 60)
    assert outcome.status == "stale" and "snippet not found in src/tiny/limit.py" in outcome.detail
    lines = mutants.summary([mutants.Outcome(caught, "caught"), mutants.Outcome(survived, "survived"),
                             mutants.Outcome(stale, "stale")])
    assert lines[-1].split()[:4] == ["ALL", "1/2", "caught", "50.0"]


def test_the_sweep_flips_each_operator_once_and_pins_the_boundary(tmp_path):
    _tiny_repo(tmp_path)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from mutant_sweep import sweep
    finally:
        sys.path.remove(str(ROOT / "tools"))
    found = sweep(tmp_path, "src/tiny/limit.py", ("tests",))
    assert [(m.old, m.new) for m in found] == [("    return x <= bound\n", "    return x < bound\n")]
    assert mutants.run_one(found[0], tmp_path, 60).status == "caught"


def test_the_runner_never_counts_the_catalogue_self_test(tmp_path):
    _tiny_repo(tmp_path)
    only_self = mutants.Mutant("self", "x", "src/tiny/limit.py", "x <= bound", "x < bound", (mutants.SELF_TEST,), "")
    assert mutants.run_one(only_self, tmp_path, 60).status == "survived"


def test_a_sweep_survivor_is_a_valid_catalogue_entry_even_with_backslashes(tmp_path):
    import tomllib

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from mutant_sweep import toml_entry
    finally:
        sys.path.remove(str(ROOT / "tools"))
    mutant = mutants.Mutant("sweep:a.py:1:0:<-><=", "sweep", "a.py", 'if s == "\\\\n" < 3:\n', 'if s == "\\\\n" <= 3:\n',
                            ("tests",), 'line 1: `"x"`')
    entry = tomllib.loads(toml_entry(mutant))["mutant"][0]
    assert (entry["old"], entry["new"], entry["description"]) == (mutant.old, mutant.new, mutant.description)
