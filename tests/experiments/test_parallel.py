"""map_runs: the results of a plain loop, in order, whatever the number of worker processes."""

import operator

import pytest

from transformer_course.experiments.parallel import map_runs


def test_workers_give_the_results_of_a_loop_in_order():
    arguments = [(a, b) for a in range(4) for b in (10, 20)]
    assert map_runs(operator.add, arguments, workers=2) == [a + b for a, b in arguments]
    assert map_runs(operator.add, arguments) == [a + b for a, b in arguments]
    assert map_runs(operator.add, [], workers=2) == []


def test_bad_arguments_are_refused_with_their_names():
    with pytest.raises(ValueError, match="workers"):
        map_runs(operator.add, [(1, 2)], workers=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        map_runs("add", [(1, 2)])


def test_workers_are_kept_for_the_next_call_and_restarted_when_shut_down():
    import os

    from transformer_course.experiments import parallel

    first = set(map_runs(_pid, [()] * 4, workers=2))
    pool = parallel._POOLS[2]
    kept = set(pool._processes)  # the pool's worker processes
    second = set(map_runs(_pid, [()] * 4, workers=2))
    # The second call runs in the same processes. (Which of them serve a call is the scheduler's
    # choice: on a busy machine one worker may take all four tasks, so compare with the pool.)
    assert parallel._POOLS[2] is pool and set(pool._processes) == kept
    assert os.getpid() not in first and first | second <= kept
    parallel.shutdown_workers()
    assert not parallel._POOLS
    third = set(map_runs(_pid, [()] * 4, workers=2))
    assert not third & first  # fresh workers after a shutdown
    parallel.shutdown_workers()


def _pid():
    import os

    return os.getpid()


def test_started_workers_are_the_ones_map_runs_uses():
    from transformer_course.experiments import parallel

    parallel.shutdown_workers()
    parallel.start_workers(2, "transformer_course.experiments.claims")
    pool = parallel._POOLS[2]
    started = set(pool._processes)  # the processes start_workers launched
    assert len(started) == 2
    assert set(map_runs(_pid, [()] * 4, workers=2)) <= started  # map_runs starts no others
    parallel.shutdown_workers()
    with pytest.raises(ValueError, match="workers"):
        parallel.start_workers(1)
    with pytest.raises(TypeError, match="modules must be module names"):
        parallel.start_workers(2, 3)
    parallel.shutdown_workers()


def _streams():
    import sys

    return sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__


def test_workers_fork_on_linux_spawn_elsewhere_and_write_to_their_own_streams(monkeypatch):
    import sys

    from transformer_course.experiments import parallel

    assert parallel.start_method() == ("fork" if sys.platform.startswith("linux") else "spawn")
    parallel.shutdown_workers()
    assert map_runs(_streams, [()] * 2, workers=2) == [(True, True)] * 2  # not the parent's (a kernel's) streams
    forked = map_runs(operator.mul, [(a, 7) for a in range(5)], workers=2)
    parallel.shutdown_workers()
    monkeypatch.setattr(parallel, "start_method", lambda: "spawn")
    assert map_runs(operator.mul, [(a, 7) for a in range(5)], workers=2) == forked == [7 * a for a in range(5)]
    parallel.shutdown_workers()


def test_workers_for_a_device_are_as_asked_on_the_cpu_and_one_elsewhere():
    from transformer_course.experiments.parallel import workers_for

    assert workers_for(2, "cpu") == workers_for(2, None) == 2
    assert workers_for(2, "cuda") == workers_for(2, "meta") == 1
    with pytest.raises(ValueError, match="workers"):
        workers_for(0, "cpu")


def test_split_evenly_cuts_consecutive_runs_of_nearly_equal_length():
    from transformer_course.experiments.parallel import split_evenly

    assert split_evenly([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert split_evenly(range(8), 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_evenly([7, 9], 5) == [[7], [9]]  # never an empty part
    assert split_evenly([], 2) == []
    parts = split_evenly(range(10), 3)
    assert [x for part in parts for x in part] == list(range(10)) and {len(p) for p in parts} == {3, 4}
    with pytest.raises(ValueError, match="parts"):
        split_evenly([1, 2], 0)


def test_forked_workers_inherit_what_a_training_run_imports():
    """In a fresh process, forked workers find torch._dynamo (the first optimizer's import) already imported."""
    import subprocess
    import sys

    from transformer_course.experiments import parallel

    if parallel.start_method() != "fork":
        pytest.skip("workers are spawned on this platform: nothing is inherited")
    script = (
        "import sys\n"
        "from transformer_course.experiments.parallel import map_runs\n"
        "def has_dynamo():\n"
        "    return 'torch._dynamo' in sys.modules\n"
        "assert not has_dynamo(), 'imported before the workers start: the test would prove nothing'\n"
        "print(map_runs(has_dynamo, [()] * 2, workers=2))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[True, True]"
