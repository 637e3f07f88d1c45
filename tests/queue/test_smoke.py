import ackqueue


def test_put_then_get_in_order(qpath):
    with ackqueue.AckQueue(qpath) as q:
        for n in range(3):
            q.put(n)
        assert [q.get() for _ in range(3)] == [0, 1, 2]


def test_demo_tells_its_story_and_exits_zero(capsys):
    from ackqueue.cli.demo import run_demo

    assert run_demo() == 0
    assert "none was lost" in capsys.readouterr().out
