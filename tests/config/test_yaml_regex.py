"""`servesim.cli.yaml_regex`: PyYAML's non-printable class, compiled the cheap way, is the same
set of characters."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from servesim.cli.yaml_regex import PYYAML_PATTERN, SAME_SET


def _matched(pattern: str) -> list[int]:
    every_code_point = "".join(map(chr, range(sys.maxunicode + 1)))
    return [m.start() for m in re.finditer(pattern, every_code_point)]


def test_the_listed_set_matches_exactly_the_code_points_pyyaml_refuses() -> None:
    refused = _matched(PYYAML_PATTERN)
    assert 0 in refused and 0x09 not in refused and 0xD800 in refused  # the scan saw what it must
    assert _matched(SAME_SET) == refused


def test_the_command_s_yaml_uses_it_and_still_refuses_a_control_character() -> None:
    script = textwrap.dedent("""\
        import sys
        from servesim.cli import yaml_regex
        yaml_regex.prime()
        import yaml
        print(yaml.reader.Reader.NON_PRINTABLE.pattern == yaml_regex.SAME_SET)
        try:
            yaml.safe_load("a: 1\\x07")
        except yaml.YAMLError as exc:
            print(str(exc).splitlines()[0])
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["True", "unacceptable character #x0007: special characters are not allowed"]


def test_pyyaml_still_writes_the_pattern_the_cache_entry_stands_in_for() -> None:
    script = "import yaml; print(repr(yaml.reader.Reader.NON_PRINTABLE.pattern))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == repr(PYYAML_PATTERN)  # else `prime` no longer saves anything
