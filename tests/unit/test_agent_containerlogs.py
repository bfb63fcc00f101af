"""CRI log files: written line by line, read with tail, timestamps and follow."""

import re
import threading

from localcluster.agent.containerlogs import MAX_LINE_BYTES, LogWriter, read_log

RECORD = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) (F|P) ")


def test_lines_are_split_into_records(tmp_path):
    writer = LogWriter(tmp_path / "c" / "0.log")
    writer.write("stdout", b"one\ntw")
    writer.write("stderr", b"err\n")
    writer.write("stdout", b"o\nthree")
    writer.end("stdout")
    writer.end("stderr")
    writer.close()
    records = (tmp_path / "c" / "0.log").read_bytes().splitlines()
    assert all(RECORD.match(record) for record in records)
    assert [r.split(b" ", 3)[1:] for r in records] == [
        [b"stdout", b"F", b"one"], [b"stderr", b"F", b"err"], [b"stdout", b"F", b"two"], [b"stdout", b"P", b"three"],
    ]
    assert b"".join(read_log(writer.path, None, False, False, None)) == b"one\nerr\ntwo\nthree"
    assert b"".join(read_log(writer.path, 1, False, False, None)) == b"three"
    assert b"".join(read_log(writer.path, 0, False, False, None)) == b""
    stamped = b"".join(read_log(writer.path, 1, True, False, None))
    assert re.match(rb"^\S+Z three$", stamped)


def test_long_lines_become_partial_records(tmp_path):
    writer = LogWriter(tmp_path / "0.log")
    writer.write("stdout", b"x" * (MAX_LINE_BYTES + 5) + b"\n")
    writer.close()
    tags = [r.split(b" ", 3)[2] for r in writer.path.read_bytes().splitlines()]
    assert tags == [b"P", b"F"]
    assert b"".join(read_log(writer.path, None, False, False, None)) == b"x" * (MAX_LINE_BYTES + 5) + b"\n"


def test_follow_ends_when_the_container_ends(tmp_path):
    writer = LogWriter(tmp_path / "0.log")
    writer.write("stdout", b"first\n")
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(read_log(writer.path, None, False, True, writer.closed)))
    reader.start()
    writer.write("stdout", b"second\n")
    writer.close()
    reader.join(5)
    assert not reader.is_alive()
    assert lines == [b"first\n", b"second\n"]
