"""How far a WorkerPool reads ahead: fixed when given or leased, else following the rate."""

import ackqueue
from ackqueue.workers.board import AHEAD_SECONDS, MOST_PREFETCH, Board
from ackqueue.workers.pool import WorkerPool
from ackqueue.workers.stats import PoolStats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def board(q, prefetch, most, clock):
    return Board(q, threads=2, prefetch=prefetch, stats=PoolStats(), most=most, clock=clock)


def test_the_prefetch_follows_the_rate_between_its_floor_and_its_ceiling(qpath):
    clock = Clock()
    with ackqueue.AckQueue(qpath) as q:
        b = board(q, 8, 64, clock)
        assert b.prefetch == 8
        clock.now += 0.1
        b.count(done=400)  # 4,000 jobs/s: 400 in AHEAD_SECONDS, above the ceiling
        assert b.prefetch == 64
        clock.now += 0.1
        b.count(done=30)  # 300 jobs/s
        assert b.prefetch == round(300 * AHEAD_SECONDS)
        clock.now += 0.01
        b.count(done=1000)  # too soon after the last look to tell a rate: unchanged
        assert b.prefetch == round(300 * AHEAD_SECONDS)
        clock.now += 100.0
        b.count(done=1)  # about 10 jobs/s over the last 100 s (1 held ahead): the floor
        assert b.prefetch == 8
        b.count(failed=1)  # failures say nothing of the rate
        assert b.prefetch == 8


def test_a_prefetch_without_room_to_grow_stays_fixed(qpath):
    clock = Clock()
    with ackqueue.AckQueue(qpath) as q:
        for most in (0, 8):
            b = board(q, 8, most, clock)
            clock.now += 1.0
            b.count(done=100_000)
            assert b.prefetch == 8


def test_the_pool_grows_only_a_prefetch_it_chose_and_not_under_a_lease(qpath, tmp_path):
    def noop(item):
        return None

    with ackqueue.AckQueue(qpath) as q:
        chosen = WorkerPool(q, noop, threads=2)
        assert chosen.prefetch == 64 and chosen._new_board()._most == MOST_PREFETCH
        given = WorkerPool(q, noop, threads=2, prefetch=10)
        assert given.prefetch == 10 and given._new_board()._most == 10
    with ackqueue.AckQueue(str(tmp_path / "leased.fs"), ack_timeout=30) as q:
        leased = WorkerPool(q, noop, threads=2)
        assert leased.prefetch == 2 and leased._new_board()._most == 2
