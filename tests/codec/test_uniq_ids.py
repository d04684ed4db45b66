"""The client's unique message ids: unique across threads, and a forked child makes its own
(its pid in them), even when the parent made ids before the fork."""

from __future__ import annotations

import os
import threading

from ferrymq.common.ids import decode_uniq_id, new_uniq_id, new_uniq_ids


def test_ids_from_many_threads_are_unique() -> None:
    made: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(len(made))

    def make(out: list[str]) -> None:
        start.wait()
        for i in range(2000):
            if i % 10 == 0:
                out.extend(new_uniq_ids(5))
            else:
                out.append(new_uniq_id())

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in made for i in out]
    assert len(every) == len(set(every)) == 6 * (1800 + 200 * 5)


def test_a_forked_child_makes_ids_of_its_own() -> None:
    before = new_uniq_id()  # the parent's generator exists before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids, one a line, then exit without the parent's cleanup
        try:
            os.close(read)
            os.write(write, "\n".join([new_uniq_id(), *new_uniq_ids(3)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child_ids = pipe.read().decode().split("\n")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child_ids) == 4
    mine = decode_uniq_id(before)
    for one in child_ids:
        parts = decode_uniq_id(one)
        assert parts.pid == pid & 0xFFFF, "the child's ids carry the parent's pid"
        assert (parts.pid, parts.instance) != (mine.pid, mine.instance)
