"""One rank's lines of horovodrun's output: whole outputs, and for any output split
into any chunks, exactly that rank's payloads."""

import time

import pytest
from hypothesis import given, settings, strategies as st

from distributetrain.cli.jobs import ranks

CHIEF_LOG = (
    "chief: checking SSH to 10.0.0.2:12345 (1 of 30)\n"
    "[0]<stdout>:rank=0 size=2 host=demo-worker-0\n"
    "[1]<stdout>:rank=1 size=2 host=demo-chief\n"
    "[1]<stderr>:2026-01-02 12:00:00.000 W tensorflow: slow step\n"
    "[0]<stdout>:epoch 1  10%\r[1]<stdout>:epoch 1  10%\r[0]<stdout>:epoch 1 100%\r[0]<stdout>:\n"
    "Fri Jan  2 12:00:01 2026[1]<stdout>:with --prefix-output-with-timestamp\n"
    "[10]<stdout>:rank ten, not rank one\n"
    "Process 1 exit with status code 0.\n"
    "[1]<stdout>:no line end at the very end"
)


def test_rank_one_of_a_chief_log():
    one = ranks.RankFilter(1)
    assert one.feed(CHIEF_LOG) + one.flush() == (
        "rank=1 size=2 host=demo-chief\n"
        "2026-01-02 12:00:00.000 W tensorflow: slow step\n"
        "epoch 1  10%\r"
        "with --prefix-output-with-timestamp\n"
        "no line end at the very end"
    )
    zero = ranks.RankFilter(0)
    assert zero.feed(CHIEF_LOG) + zero.flush() == "rank=0 size=2 host=demo-worker-0\nepoch 1  10%\repoch 1 100%\r\n"


def test_a_line_waits_for_its_end():
    one = ranks.RankFilter(1)
    assert one.feed("[1]<std") == ""
    assert one.feed("out>:hel") == ""
    assert one.feed("lo\n[0]<stdout>:x\n[1]") == "hello\n"
    assert one.feed("<stderr>:bye\r") == "bye\r"
    assert one.flush() == ""


@pytest.mark.parametrize("text,rank", [("0", 0), ("1", 1), ("63", 63)])
def test_parse_rank(text, rank):
    assert ranks.parse_rank(text) == rank


@pytest.mark.parametrize("text", ["", "-1", "one", "1.5", " 1"])
def test_bad_rank(text):
    with pytest.raises(ValueError, match="must be a Horovod rank"):
        ranks.parse_rank(text)


# What one line of a rank can say: anything but a line end.
payloads = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20)
ends = st.sampled_from(["\n", "\r"])
rank_lines = st.tuples(st.integers(0, 11), st.sampled_from(["stdout", "stderr"]), st.booleans(), payloads, ends)
# horovodrun's own lines and the chief script's: never a rank prefix.
other_lines = st.tuples(payloads.filter(lambda text: not ranks.RANK_PREFIX.match(text)), ends)


def horovod_line(rank: int, stream: str, stamped: bool, payload: str) -> str:
    """As safe_shell_exec.prefix_connection writes it."""
    stamp = time.asctime(time.gmtime(1767355200)) if stamped else ""
    return f"{stamp}[{rank}]<{stream}>:{payload}"


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.one_of(rank_lines, other_lines), max_size=30),
       last=st.one_of(st.none(), st.tuples(st.integers(0, 11), payloads)),
       cuts=st.lists(st.integers(0, 2000), max_size=8),
       rank=st.integers(0, 11))
def test_filtering_one_rank_gives_exactly_its_payloads(lines, last, cuts, rank):
    output, expected = "", ""
    for line in lines:
        if len(line) == 5:
            line_rank, stream, stamped, payload, end = line
            output += horovod_line(line_rank, stream, stamped, payload) + end
            expected += payload + end if line_rank == rank else ""
        else:
            output += line[0] + line[1]
    if last is not None:  # the rank's output ended without a line end
        output += horovod_line(last[0], "stdout", False, last[1])
        expected += last[1] if last[0] == rank else ""
    one = ranks.RankFilter(rank)
    bounds = [0, *sorted(c % (len(output) + 1) for c in cuts), len(output)]
    shown = "".join(one.feed(output[start:end]) for start, end in zip(bounds, bounds[1:])) + one.flush()
    assert shown == expected
