"""`servesim.safejson` and the trace readers that parse JSON through it (issue 35, part B)."""

from __future__ import annotations

import pytest

from servesim import safejson
from servesim.errors import TraceError
from servesim.traffic.jsonl import read_jsonl


def _refusal(text: str, **kwargs) -> safejson.JsonRefused:
    with pytest.raises(safejson.JsonRefused) as caught:
        safejson.loads(text, **kwargs)
    return caught.value


@pytest.mark.parametrize(("text", "line", "words"), [
    ('{"a": NaN}', 1, "NaN"),
    ('{\n"a": 1,\n"b": -Infinity}', 3, "-Infinity"),
    ('{"s": "NaN",\n "n": Infinity}', 2, "Infinity"),
    ('[1,\n 99999999999999999999]', 2, "out of range"),
    ('[1, ' + "9" * 5000 + ']', 1, "digits"),
    ('{"a":\n 1e999}', 2, "largest float"),
    ('{"x":\n' + "[" * 70 + "]" * 70 + "}", 2, "nested deeper than 64"),
    ("[" * 100_000 + "]" * 100_000, 1, "nested deeper"),
    ('{"a":\n 1', 2, "invalid JSON"),
])
def test_loads_refuses_with_the_line(text, line, words):
    refusal = _refusal(text)
    assert refusal.line == line and words in str(refusal)
    assert refusal.where("f.json").startswith(f"f.json:{line}: ")


def test_loads_accepts_what_json_means():
    assert safejson.loads('{"a": [1, 2.5e300, -9223372036854775807, null, "NaN"]}') == \
        {"a": [1, 2.5e300, -9223372036854775807, None, "NaN"]}
    assert safejson.loads("[" * 64 + "]" * 64) is not None


def test_fast_mode_leaves_ids_and_depth_to_the_caller_but_not_nan():
    assert safejson.loads("[18446744073709551615]", max_int=False, max_depth=None) == [2**64 - 1]
    assert "NaN" in str(_refusal('[NaN]', max_int=False, max_depth=None))


def test_decode_names_the_line_of_a_bad_byte(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"a":\n"\xff"}')
    with pytest.raises(safejson.JsonRefused) as caught:
        safejson.read_json(path)
    assert caught.value.line == 2 and "UTF-8" in str(caught.value)


@pytest.mark.parametrize(("value", "expected"), [
    (1, 1.0), (2.5, 2.5), (True, None), ("1", None), (float("inf"), None), (float("nan"), None),
    (10**400, None), (None, None)])
def test_finite_number(value, expected):
    assert safejson.finite_number(value) == expected


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_trace_rows_with_nan_or_infinity_name_their_line(tmp_path, bad):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 5, "output_length": 2}\n'
                    f'{{"timestamp": 2, "input_length": 5, "output_length": 2, "extra": {bad}}}\n')
    with pytest.raises(TraceError) as caught:
        list(read_jsonl(str(path)))
    assert str(caught.value).startswith(f"{path}:2: ") and bad in str(caught.value)


def test_trace_rows_keep_64_bit_hash_ids(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 5, "output_length": 2, "extra": [18446744073709551615]}\n')
    assert list(read_jsonl(str(path)))[0][1]["extra"] == [2**64 - 1]
