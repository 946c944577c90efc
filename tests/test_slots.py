"""The Worker slots' rules, without Ray: backoff, giving up, forgiving a Worker that trained,
retiring, and new slots for scaling up."""

from a3c_ray.runtime.slots import WorkerSlots


def _slots(n: int = 2, max_restarts: int = 3) -> WorkerSlots:
    return WorkerSlots(
        n, max_restarts=max_restarts, healthy_after=100.0, backoff=1.0, max_backoff=5.0
    )


def test_backoff_doubles_up_to_its_bound_then_the_run_gives_up():
    s = _slots(max_restarts=4)
    delays = []
    now = 0.0
    for _ in range(4):
        s.started(0, now)
        f = s.failed(0, now + 1.0)  # it ran 1 s and never trained
        assert f is not None and not f.give_up
        delays.append(f.restart_in)
        now += 10.0
        assert s.due(now) == [0]
    assert delays == [1.0, 2.0, 4.0, 5.0]
    s.started(0, now)
    f = s.failed(0, now + 1.0)
    assert f is not None and f.give_up and f.count == 5
    assert not s.waiting  # no replacement is queued for a slot given up on


def test_a_worker_that_trained_or_ran_long_starts_its_slots_count_afresh():
    s = _slots()
    s.note_steps({0: 0, 1: 0})
    s.started(0, 0.0)
    assert s.failed(0, 1.0).count == 1
    s.started(0, 2.0)
    s.note_steps({0: 40, 1: 0})  # slot 0's new Worker pushed
    assert s.failed(0, 3.0).count == 1
    s.started(1, 0.0)
    assert s.failed(1, 1.0).count == 1
    s.started(1, 2.0)
    assert s.failed(1, 2.0 + 100.0).count == 1  # ran healthy_after seconds
    s.started(1, 200.0)
    assert s.failed(1, 201.0).count == 2  # this one did neither


def test_steps_that_go_back_to_a_checkpoints_are_not_training():
    s = _slots()
    s.note_steps({0: 500})
    s.started(0, 0.0)
    s.note_steps({0: 300})  # the ParameterServer restored an older checkpoint
    assert s.failed(0, 1.0).count == 1
    s.started(0, 2.0)
    assert s.failed(0, 3.0).count == 2
    s.started(0, 4.0)
    s.note_steps({0: 301})
    assert s.failed(0, 5.0).count == 1


def test_a_restart_is_due_only_after_its_backoff_and_not_once_cancelled():
    s = _slots()
    s.started(0, 0.0)
    s.started(1, 0.0)
    s.failed(0, 1.0)  # due at 2.0
    s.failed(1, 1.0)
    s.failed(1, 1.5)  # slot 1's second failure: due at 3.5
    assert s.due(1.9) == []
    assert s.due(2.0) == [0]
    assert s.due(2.0) == []  # taken off the list
    assert s.waiting
    s.cancel_restarts()
    assert not s.waiting and s.due(100.0) == []


def test_retiring_drops_a_waiting_restart_and_ignores_the_retired_workers_failure():
    s = _slots(n=3)
    for i in range(3):
        s.started(i, 0.0)
    s.failed(2, 1.0)
    assert s.active([0, 1]) == [0, 1, 2]  # slot 2 waits for its replacement
    assert s.retire(2) is False  # it was only waiting: nothing to tell the ParameterServer
    assert s.retire(1) is True  # its Worker runs: it must be told
    assert s.active([0, 1]) == [0]
    assert s.failed(1, 2.0) is None
    assert s.due(1000.0) == []


def test_new_slots_follow_every_slot_ever_used_and_streams_count_per_slot():
    s = _slots(n=2)
    assert s.new_slot() == 2
    assert s.new_slot() == 3
    assert [s.started(3, 0.0), s.started(3, 1.0), s.started(0, 1.0)] == [0, 1, 0]
