import pytest
import torch

from transformer_course.measure.cost import BLOCK_COMPONENTS, block_flops
from transformer_course.measure.timing import (forward_time_table, machine_peaks, median_times, round_times, threads,
                                              time_block_components)
from transformer_course.nn.layers import EncoderLayer
from transformer_course.nn.rnn import ElmanRNN


def test_median_times_interleaves_rounds_of_benchmark_timers():
    calls = []
    out = median_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3)
    assert set(out) == {"a", "b"} and all(v > 0 for v in out.values())
    assert calls == (["a"] * 3 + ["b"] * 3) * 3  # each round: two warm-up calls and one timed, a then b
    with pytest.raises(TypeError, match="fn must be callable"):
        median_times({"f": 3})
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        median_times({"f": lambda: None}, repeats=0)
    with pytest.raises(TypeError, match="fns must be"):
        median_times({})


def test_median_times_sets_the_thread_count_only_while_timing():
    before = torch.get_num_threads()
    seen = []
    median_times({"f": lambda: seen.append(torch.get_num_threads())}, repeats=1, num_threads=1)
    assert set(seen) == {1} and torch.get_num_threads() == before


def test_forward_time_table_structure_and_threads_restored():
    before = torch.get_num_threads()
    table = forward_time_table({"RNN": ElmanRNN(4), "T": EncoderLayer(4, 2, 8)}, (2, 3), repeats=1, num_threads=1)
    assert torch.get_num_threads() == before
    assert list(table.columns) == ["RNN (ms)", "T (ms)"] and list(table.index) == [2, 3]
    assert (table > 0).all().all()
    with pytest.raises(TypeError, match=r"modules\['x'\]"):
        forward_time_table({"x": torch.nn.Linear(2, 2)}, (2,))
    with pytest.raises(ValueError, match="lengths must be"):
        forward_time_table({"RNN": ElmanRNN(4)}, [])


def test_threads_context_validates():
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        with threads(0):
            pass


def test_time_block_components_structure():
    frame = time_block_components(8, 16, num_heads=2, expansion=2, repeats=1)
    assert list(frame.index) == list(BLOCK_COMPONENTS)
    assert list(frame.columns) == ["time (ms)", "time share (%)", "lowest share (%)", "highest share (%)", "FLOPs",
                                   "FLOP share (%)"]
    assert (frame["time (ms)"] > 0).all()
    assert frame["time share (%)"].sum() == pytest.approx(100)
    assert frame["FLOP share (%)"].sum() == pytest.approx(100)
    parts = block_flops(8, 16, 2, 2)
    assert frame.loc["ffn", "FLOPs"] == parts["ffn"]
    with pytest.raises(ValueError, match="d must be divisible by num_heads"):
        time_block_components(8, 10, num_heads=4)
    with pytest.raises(ValueError, match="statistic must be"):
        time_block_components(8, 16, num_heads=2, statistic="mean")
    with pytest.raises(ValueError, match="groups must be <= repeats"):
        time_block_components(8, 16, num_heads=2, repeats=2, groups=3)


def test_time_block_components_min_statistic_and_groups():
    frame = time_block_components(8, 16, num_heads=2, repeats=4, groups=2, statistic="min", number=2)
    assert frame["time share (%)"].sum() == pytest.approx(100)
    assert (frame["lowest share (%)"] <= frame["highest share (%)"]).all()
    single = time_block_components(8, 16, num_heads=2, repeats=2, groups=1)
    assert (single["lowest share (%)"] == single["highest share (%)"]).all()


def test_round_times_and_machine_peaks():
    rounds = round_times({"a": lambda: None, "b": lambda: None}, repeats=3, number=2)
    assert list(rounds.columns) == ["a", "b"] and len(rounds) == 3 and (rounds > 0).all().all()
    with pytest.raises(ValueError, match="number must be >= 1"):
        round_times({"a": lambda: None}, number=0)
    peaks = machine_peaks(size=32, copy_megabytes=0.25, repeats=2)
    assert peaks["matmul FLOP/s"] > 0 and peaks["bandwidth (bytes/s)"] > 0
    assert peaks["ridge (FLOPs per byte)"] == pytest.approx(peaks["matmul FLOP/s"] / peaks["bandwidth (bytes/s)"])
    with pytest.raises(ValueError, match="copy_megabytes must be"):
        machine_peaks(copy_megabytes=0)
    with pytest.raises(ValueError, match="expansion"):
        time_block_components(8, 16, num_heads=2, expansion=1.03)


def test_training_step_mfu_counts_times_and_leaves_the_weights_alone():
    from transformer_course.measure.cost import measure_training_flops
    from transformer_course.measure.timing import training_step_mfu
    from transformer_course.nn.model import Encoder

    torch.manual_seed(0)
    model = Encoder(1, 16, 2, 32)
    x = torch.randn(2, 8, 16)
    before = [p.detach().clone() for p in model.parameters()]
    result = training_step_mfu(model, x, reference_flops=1e9, repeats=2)
    counted = measure_training_flops(model, x)["total"]
    assert result["model FLOPs per step"] == counted == 3 * 2 * block_flops(8, 16, 2, num_heads=2)["total"]  # B = 2, e = 2
    assert result["step time (s)"] > 0
    assert result["achieved FLOP/s"] == pytest.approx(counted / result["step time (s)"])
    assert result["utilisation"] == pytest.approx(result["achieved FLOP/s"] / 1e9)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # Adam at lr 0: no change
    assert all(p.grad is None for p in model.parameters())
    given = training_step_mfu(model, x, reference_flops=2e9, flops=1000, repeats=1)
    assert given["model FLOPs per step"] == 1000 and given["reference FLOP/s"] == 2e9
    with pytest.raises(ValueError, match="reference_flops must be"):
        training_step_mfu(model, x, reference_flops=0.0)
    with pytest.raises(TypeError, match="x must be a floating torch.Tensor"):
        training_step_mfu(model, torch.ones(2, 8, 16, dtype=torch.long), reference_flops=1e9)
    with pytest.raises(TypeError, match="module must be"):
        training_step_mfu("model", x, reference_flops=1e9)
    with pytest.raises(ValueError, match="flops must be >= 1"):
        training_step_mfu(model, x, reference_flops=1e9, flops=0)
