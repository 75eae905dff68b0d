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

    safe = sys.platform.startswith("linux") and not parallel.accelerator_present()
    assert parallel.start_method() == ("fork" if safe else "spawn")
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


def test_workers_are_spawned_wherever_an_accelerator_makes_forking_unsafe(monkeypatch):
    """The decision: fork only on Linux with no accelerator and no CUDA context (a GPU cannot be faked here)."""
    import torch

    from transformer_course.experiments import parallel

    monkeypatch.setattr(parallel.sys, "platform", "linux")
    monkeypatch.setattr(parallel, "accelerator_present", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert parallel.start_method() == "fork"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert parallel.start_method() == "spawn"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(parallel, "accelerator_present", lambda: True)
    assert parallel.start_method() == "spawn"
    monkeypatch.setattr(parallel.sys, "platform", "darwin")
    monkeypatch.setattr(parallel, "accelerator_present", lambda: False)
    assert parallel.start_method() == "spawn"


def test_a_cuda_device_counts_as_an_accelerator(monkeypatch):
    import torch

    from transformer_course.experiments import parallel

    monkeypatch.setattr(parallel, "ACCELERATOR_MODULES", ("cuda",))  # the other backends left out
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert parallel.accelerator_present() is True
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert parallel.accelerator_present() is False

    def no_driver():
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.cuda, "device_count", no_driver)
    assert parallel.accelerator_present() is False  # a backend that cannot count its devices has none


BACKWARD_PROBE = """
import torch


def backward_run(seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(3, generator=generator, requires_grad=True)
    (x * x).sum().backward()
    return round(float(x.grad.sum()), 6)
"""


def test_workers_train_after_the_caller_ran_autograd_on_a_machine_with_an_accelerator(tmp_path):
    """The GPU runtime's failure, reproduced on the CPU, in a fresh process.

    An accelerator device (here PyTorch's own stand-in for a custom backend: one device) makes
    autograd start its device threads at the first backward pass; a worker forked after that stops
    with "Unable to handle autograd's threading in combination with fork-based multiprocessing",
    as DL0035 did on a GPU machine. The workers must still compute what a loop computes.
    """
    import subprocess
    import sys

    (tmp_path / "backward_probe.py").write_text(BACKWARD_PROBE)
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from torch.utils.backend_registration import _setup_privateuseone_for_python_backend\n"
        "from backward_probe import backward_run\n"
        "from transformer_course.experiments.parallel import map_runs, start_method\n"
        "_setup_privateuseone_for_python_backend()  # one stand-in accelerator device\n"
        "backward_run(0)  # the caller runs autograd first, as every chapter does\n"
        "print(start_method())\n"
        "print(map_runs(backward_run, [(s,) for s in range(4)], workers=2) == [backward_run(s) for s in range(4)])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["spawn", "True"]
