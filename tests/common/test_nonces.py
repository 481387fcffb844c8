"""Nonces: hex of the asked size, never repeated across the batches they are drawn in."""

from __future__ import annotations

from common.nonces import Nonces


def test_nonces_differ_across_batches_and_have_the_asked_size() -> None:
    make = Nonces(8, batch=4)
    got = [make() for _ in range(3 * 4 + 1)]  # three whole batches and the start of a fourth
    assert len(set(got)) == len(got)
    assert all(len(n) == 16 and int(n, 16) >= 0 for n in got)


def test_separate_sources_do_not_share_a_batch() -> None:
    a, b = Nonces(16), Nonces(16)
    assert {a() for _ in range(10)}.isdisjoint({b() for _ in range(10)})


def test_a_forked_child_does_not_hand_out_its_parents_nonces() -> None:
    import os

    make = Nonces(8)
    make()  # the parent has drawn a batch
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next nonce and leave at once
        os.write(write, make().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 16 and child != make()
