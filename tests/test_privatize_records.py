"""``rapt-audit privatize`` keeps records as they were: only the text changes, or the record is refused.

Every field privatize does not touch comes back byte for byte (JSON Lines: the number spellings
``NaN``, ``1e999``, ``-0.0``, ``1.10`` included; CSV: every other cell's value), and a record that
could not be written back as it was (a key twice, a header naming a column twice, a row with more
cells than the header) stops the command with exit 2 and one line naming the line and the fix.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from rapt_audit.api.errors import DataError
from rapt_audit.cli import main
from rapt_audit.user_side.formats import Layout, Writer, read_items

#: Lines whose other fields hold what a re-encoding would change: non-standard numbers, spacing, key
#: order, escapes, nesting, a lone surrogate escape outside the text.
JSONL = [
    '{"id": 1, "a": NaN, "b": Infinity, "c": -Infinity, "d": 1e999, "e": -0.0, "f": 1.10, "text": "caf\\u00e9"}',
    '{ "text" :"two words"   , "n":{"x":[1.0,2E3, -1e-999], "y": null}, "s": "\\u00e9\\ud800\\n"}',
    '  {"z": 0.1000, "text": "x\\"y", "big": 123456789012345678901234567890}  ',
    '{"text": "last", "tail": [true, false, "\\/"]}',
]


def _privatize(data: bytes, layout: Layout, change=str.upper) -> str:  # noqa: ANN001
    """The output of privatizing ``data`` with ``change`` as the mechanism (no model, no defense)."""
    out = io.StringIO()
    writer = Writer(out, layout)
    for item in read_items(io.BytesIO(data), layout, name="in"):
        writer.write(item, change(item.text))
    return out.getvalue()


def _text_value(line: str) -> re.Match:
    return re.search(r'"text"\s*:\s*("(?:[^"\\]|\\.)*")', line)


def test_jsonl_fields_privatize_did_not_touch_come_back_byte_for_byte():
    out = _privatize("".join(line + "\n" for line in JSONL).encode(), Layout("jsonl", "text")).splitlines()
    assert len(out) == len(JSONL)
    for before, after in zip(JSONL, out):
        old, new = _text_value(before), _text_value(after)
        assert before[:old.start(1)] == after[:new.start(1)]  # every byte before the text's value
        assert before[old.end(1):] == after[new.end(1):]  # and every byte after it
        # The text's value is standard JSON (no NaN spelling can reach it), and privatized.
        value = json.loads(new.group(1), parse_constant=lambda c: pytest.fail(f"non-standard {c}"))
        assert value == json.loads(old.group(1)).upper()


def test_jsonl_refuses_a_key_twice_naming_the_line():
    layout = Layout("jsonl", "text")
    for line in ('{"text": "a", "text": "b"}', '{"id": 1, "text": "a", "id": 2}', '{"text": "a", "m": {"k": 1, "k": 2}}'):
        with pytest.raises(DataError, match=r"in: line 2 has the key '(text|id|k)' twice in one object.*rename one"):
            _privatize(('{"text": "fine"}\n' + line + "\n").encode(), layout)


def test_csv_keeps_every_other_cell_value_and_short_rows_as_read():
    data = 'id,review,note\n1,"Great food, rude staff.","say ""hi"""\n2,slow\n\n3,"two\nlines", x \n'
    out = _privatize(data.encode(), Layout("csv", "review"))
    assert out == 'id,review,note\n1,"GREAT FOOD, RUDE STAFF.","say ""hi"""\n2,SLOW\n3,"TWO\nLINES", x \n'


@pytest.mark.parametrize("data, message", [
    ("id,review\n1,fine\n2,a,EXTRA1,EXTRA2\n",
     r"in: the row ending on line 3 has 4 cells but the header names 2 columns; quote a cell"),
    ("id,review,id\n1,a,2\n", r"in: line 1: the header names the column 'id' twice; rename one"),
])
def test_csv_refuses_what_it_could_not_write_back(data, message):
    with pytest.raises(DataError, match=message):
        _privatize(data.encode(), Layout("csv", "review"))


@pytest.mark.parametrize("name, content, where", [
    ("in.jsonl", '{"text": "a"}\n{"text": "a", "text": "b"}\n', "line 2 has the key 'text' twice"),
    ("in.csv", "text,id\nok,1\nbad,2,EXTRA\n", "the row ending on line 3 has 3 cells"),
    ("in.tsv", "text\tid\ttext\nok\t1\tx\n", "line 1: the header names the column 'text' twice"),
])
def test_the_command_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, name, content, where):
    src, out = tmp_path / name, tmp_path / f"out-{name}"
    src.write_text(content, encoding="utf-8")
    assert main(["privatize", str(src), "--defense", "identity", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert where in err and len(err.splitlines()) == 1, err
    assert not out.exists() and src.read_text(encoding="utf-8") == content


def test_the_command_writes_other_fields_back_as_read(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": 7, "score": NaN, "big": 1e999, "zero": -0.0, "p": 1.10, "text": "plain words"}\n',
                   encoding="utf-8")
    assert main(["privatize", str(src), "--defense", "identity", "--out", str(out), "--quiet"]) == 0
    assert out.read_bytes() == src.read_bytes()  # identity changes no text, and nothing else changes


def test_jsonl_nested_past_the_readers_depth_is_a_message():
    with pytest.raises(DataError, match="in: line 1 nests objects or lists too deeply"):
        _privatize(('{"text": "a", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode(), Layout("jsonl"))
