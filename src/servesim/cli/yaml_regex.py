"""PyYAML's import, without its most expensive line.

Importing `yaml` compiles ``yaml.reader.Reader.NON_PRINTABLE``, a character class of every
code point YAML forbids written as the complement of five wide ranges. Python's regex compiler
walks such ranges one code point at a time: ~57 M instructions (~13 ms), a twentieth of a short
run. The same set written directly — the few forbidden ranges — compiles ~13 times faster.
`prime` compiles that equivalent class and files it in `re`'s pattern cache under PyYAML's
pattern, so PyYAML's ``re.compile`` gets it from the cache. Only the compiled program differs:
both match exactly the same characters (tests/config/test_yaml_regex.py checks every code
point). Where `re` keeps no such cache, or once `yaml` is imported, it does nothing.
"""

from __future__ import annotations

import re
import sys

PYYAML_PATTERN = "[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]"
"""``yaml.reader.Reader.NON_PRINTABLE``'s pattern: what is not in YAML's printable set."""
SAME_SET = "[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x84\x86-\x9F\uD800-\uDFFF\uFFFE\uFFFF]"
"""The same characters, listed: the C0 controls but tab and line breaks, DEL and the C1
controls but NEL, the surrogates, U+FFFE and U+FFFF."""


def prime() -> None:
    """Let the coming ``import yaml`` find its non-printable class compiled (see the module
    docstring)."""
    cache = getattr(re, "_cache", None)
    if "yaml" in sys.modules or not isinstance(cache, dict):
        return
    cache.setdefault((str, PYYAML_PATTERN, 0), re.compile(SAME_SET))
