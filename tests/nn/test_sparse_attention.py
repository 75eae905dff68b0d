"""Banded and dilated attention equal dense masked attention, compute only O(n w) / O(n^2 / d) scores."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from transformer_course.measure.cost import count_flops
from transformer_course.measure.memory import MemoryTracker, measure_attention, peak_memory
from transformer_course.nn.attention import scaled_dot_product_attention
from transformer_course.nn.masks import band_limits, dilated_mask, dilated_sliding_window_mask, sliding_window_mask
from transformer_course.nn.sparse_attention import (
    IMPLEMENTATIONS,
    _band_block_mask,
    _choose_implementation,
    dilated_attention,
    dilated_sliding_window_attention,
    score_counts,
    sliding_window_attention,
)


def _qkv(gen, *shape, dtype=torch.float64, d_value=None):
    q, k = torch.randn(2, *shape, generator=gen, dtype=dtype)
    v = torch.randn(*shape[:-1], d_value or shape[-1], generator=gen, dtype=dtype)
    return q, k, v


def _dense(q, k, v, mask):
    return scaled_dot_product_attention(q, k, v, mask=mask)[0]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t", [1, 2, 7, 31, 64, 100, 257])
@pytest.mark.parametrize("window", [1, 2, 3, 8, 33, 64, 130, 600])
def test_sliding_window_equals_dense_masked(gen, t, window, causal):
    q, k, v = _qkv(gen, 2, 3, t, 8, d_value=5)
    expected = _dense(q, k, v, sliding_window_mask(t, window, causal))
    torch.testing.assert_close(sliding_window_attention(q, k, v, window, causal), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t", [1, 2, 7, 31, 64, 100, 257])
@pytest.mark.parametrize("window", [1, 2, 3, 8, 33, 64, 130, 600])
def test_fused_path_equals_dense_masked(gen, t, window, causal):
    q, k, v = _qkv(gen, 2, 3, t, 8, d_value=5)
    expected = _dense(q, k, v, sliding_window_mask(t, window, causal))
    got = sliding_window_attention(q, k, v, window, causal, implementation="fused")
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t,window", [(1, 3), (31, 8), (200, 33), (300, 64), (130, 600)])
def test_flex_path_equals_dense_masked(gen, t, window, causal):
    # On the CPU FlexAttention runs its unfused reference: this checks the band's mask_mod, the
    # cached block mask and the reshaping that the compiled CUDA kernel receives.
    q, k, v = _qkv(gen, 2, 3, t, 8, d_value=5)
    expected = _dense(q, k, v, sliding_window_mask(t, window, causal))
    got = sliding_window_attention(q, k, v, window, causal, implementation="flex")
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("implementation", ["blocked", "fused"])
@pytest.mark.parametrize("block_size", [1, 3, 16, 50, 1000])
def test_sliding_window_any_block_size(gen, block_size, implementation):
    q, k, v = _qkv(gen, 97, 4)
    for window, causal in ((9, False), (9, True), (40, False)):
        expected = _dense(q, k, v, sliding_window_mask(97, window, causal))
        got = sliding_window_attention(q, k, v, window, causal, block_size=block_size, implementation=implementation)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_fused_path_takes_non_contiguous_heads(gen):
    q, k, v = _qkv(gen, 2, 300, 3, 8)  # (B, T, H, Dh): heads not yet moved in front
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # (B, H, T, Dh), non-contiguous views
    expected = _dense(q, k, v, sliding_window_mask(300, 40))
    torch.testing.assert_close(sliding_window_attention(q, k, v, 40, implementation="fused"), expected,
                               atol=1e-12, rtol=0)


def test_auto_picks_flex_on_cuda_fused_for_inference_blocked_for_training(gen, monkeypatch):
    from transformer_course.nn import sparse_attention

    monkeypatch.setattr(sparse_attention, "flex_runs_on", lambda device, dtype: True)
    assert _choose_implementation(torch.device("cuda", 0), needs_grad=False) == "flex"
    assert _choose_implementation(torch.device("cuda", 0), needs_grad=True) == "flex"
    monkeypatch.setattr(sparse_attention, "flex_runs_on", lambda device, dtype: False)  # a card Triton cannot use
    assert _choose_implementation(torch.device("cuda", 0), needs_grad=False, dtype=torch.bfloat16) == "fused"
    assert _choose_implementation(torch.device("cuda", 0), needs_grad=True, dtype=torch.bfloat16) == "blocked"
    monkeypatch.undo()
    assert _choose_implementation(torch.device("cpu"), needs_grad=False) == "fused"
    assert _choose_implementation(torch.device("cpu"), needs_grad=True) == "blocked"
    assert set(IMPLEMENTATIONS) == {"auto", "blocked", "fused", "flex"}
    q, k, v = _qkv(gen, 50, 4)
    x = q.clone().requires_grad_()
    sliding_window_attention(x, k, v, 8).sum().backward()  # auto: the blocked path, which backpropagates
    with torch.no_grad():
        torch.testing.assert_close(sliding_window_attention(x, k, v, 8), _dense(q, k, v, sliding_window_mask(50, 8)),
                                   atol=1e-12, rtol=0)


def test_a_device_where_flex_attention_fails_is_reported_once_and_not_used(monkeypatch):
    from transformer_course.nn import sparse_attention

    def broken():
        def compiled(*args, **kwargs):
            raise RuntimeError("Triton: this card has no bfloat16 support\nmore detail")
        return compiled

    sparse_attention.flex_runs_on.cache_clear()
    monkeypatch.setattr(sparse_attention, "_compiled_flex_attention", broken)
    with pytest.warns(RuntimeWarning, match=r"FlexAttention does not run on cpu in torch.bfloat16 \(RuntimeError: "
                                            r"Triton: this card has no bfloat16 support\)"):
        assert sparse_attention.flex_runs_on(torch.device("cpu"), torch.bfloat16) is False
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sparse_attention.flex_runs_on(torch.device("cpu"), torch.bfloat16) is False
    assert not caught  # tried once per device and dtype: no second warning
    sparse_attention.flex_runs_on.cache_clear()


def test_flex_block_mask_is_built_once_per_length_band_and_device():
    cpu = torch.device("cpu")
    assert _band_block_mask(300, 4, 4, cpu) is _band_block_mask(300, 4, 4, cpu)
    assert _band_block_mask(300, 4, 4, cpu) is not _band_block_mask(300, 7, 0, cpu)  # the causal band differs
    assert _band_block_mask(300, 4, 4, cpu) is not _band_block_mask(301, 4, 4, cpu)


@pytest.mark.parametrize("implementation", ["blocked", "fused", "flex"])
def test_sliding_window_matches_torch_sdpa_float32(gen, implementation):
    q, k, v = _qkv(gen, 2, 500, 16, dtype=torch.float32)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(500, 64))
    got = sliding_window_attention(q, k, v, 64, implementation=implementation)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_window_wider_than_sequence_is_full_attention(gen):
    q, k, v = _qkv(gen, 20, 4)
    torch.testing.assert_close(sliding_window_attention(q, k, v, 100), _dense(q, k, v, None), atol=1e-12, rtol=0)
    torch.testing.assert_close(sliding_window_attention(q, k, v, 20, causal=True),
                               _dense(q, k, v, torch.ones(20, 20, dtype=torch.bool).tril()), atol=1e-12, rtol=0)


def test_window_one_returns_the_values(gen):
    q, k, v = _qkv(gen, 3, 10, 4)
    torch.testing.assert_close(sliding_window_attention(q, k, v, 1), v)
    torch.testing.assert_close(dilated_attention(q, k, v, 10), v)  # d >= T: each token alone


def test_causal_window_ignores_the_future(gen):
    q, k, v = _qkv(gen, 40, 4)
    out = sliding_window_attention(q, k, v, 8, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[25:], v2[25:] = 0.0, 7.0
    torch.testing.assert_close(sliding_window_attention(q, k2, v2, 8, causal=True)[:25], out[:25])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t", [1, 5, 12, 64, 100, 131])
@pytest.mark.parametrize("dilation", [1, 2, 3, 4, 7, 64, 200])
def test_dilated_equals_dense_masked(gen, t, dilation, causal):
    q, k, v = _qkv(gen, 2, 3, t, 8, d_value=6)
    expected = _dense(q, k, v, dilated_mask(t, dilation, causal))
    torch.testing.assert_close(dilated_attention(q, k, v, dilation, causal), expected, atol=1e-12, rtol=0)


def test_dilation_one_is_full_attention(gen):
    q, k, v = _qkv(gen, 30, 4)
    torch.testing.assert_close(dilated_attention(q, k, v, 1), _dense(q, k, v, None), atol=1e-12, rtol=0)


@pytest.mark.parametrize("implementation", ["blocked", "fused", "flex"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t,window,dilation", [(1, 3, 2), (24, 5, 3), (100, 9, 4), (131, 4, 7), (50, 1, 5), (64, 200, 2)])
def test_dilated_sliding_window_equals_dense_masked(gen, t, window, dilation, causal, implementation):
    q, k, v = _qkv(gen, 2, t, 8)
    expected = _dense(q, k, v, dilated_sliding_window_mask(t, window, dilation, causal))
    got = dilated_sliding_window_attention(q, k, v, window, dilation, causal, implementation=implementation)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_dilated_sliding_window_mask():
    mask = dilated_sliding_window_mask(30, 5, 3)
    assert mask[15].nonzero().flatten().tolist() == [9, 12, 15, 18, 21]
    assert torch.equal(dilated_sliding_window_mask(30, 7, 1), sliding_window_mask(30, 7))
    assert torch.equal(dilated_sliding_window_mask(30, 7, 1, causal=True), sliding_window_mask(30, 7, causal=True))
    assert torch.equal(dilated_sliding_window_mask(30, 100, 4), dilated_mask(30, 4))


def test_gradcheck_tiny():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (x.requires_grad_() for x in _qkv(gen, 9, 2))
    assert torch.autograd.gradcheck(lambda q, k, v: sliding_window_attention(q, k, v, 4, block_size=3), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: sliding_window_attention(q, k, v, 3, causal=True), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: dilated_attention(q, k, v, 3), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: dilated_attention(q, k, v, 4, causal=True), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: dilated_sliding_window_attention(q, k, v, 3, 2), (q, k, v))


def test_inference_mode_then_autograd(gen):
    q, k, v = _qkv(gen, 50, 4, dtype=torch.float32)
    with torch.inference_mode():
        sliding_window_attention(q, k, v, 8)
    x = q.clone().requires_grad_()
    sliding_window_attention(x, x, x, 8).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_no_quadratic_tensor_is_created(gen):
    t, window = 2048, 64
    q, k, v = _qkv(gen, 1, t, 16, dtype=torch.float32)
    _, banded_largest = peak_memory(sliding_window_attention, q, k, v, window)
    _, dense_largest = peak_memory(_dense, q, k, v, sliding_window_mask(t, window))
    assert dense_largest == t * t
    assert banded_largest <= 2 * t * window
    _, dilated_largest = peak_memory(dilated_attention, q, k, v, 8)
    assert dilated_largest == t * t // 8


@pytest.mark.parametrize("implementation", ["blocked", "fused"])
def test_peak_memory_grows_linearly_with_length(gen, implementation):
    peaks = []
    for t in (1024, 2048, 4096):
        q, k, v = _qkv(gen, 1, t, 16, dtype=torch.float32)
        peaks.append(peak_memory(sliding_window_attention, q, k, v, 64, implementation=implementation)[0])
    assert 1.8 < peaks[1] / peaks[0] < 2.2 and 1.8 < peaks[2] / peaks[1] < 2.2


def test_fused_path_never_holds_a_score_block(gen):
    # The blocked path holds all (nb, b, L) score blocks at once; the fused one hands them to a
    # kernel that keeps them in cache, so what it holds is about the output (and its parts), the
    # edge masks, and its views of k and v (which the tracker charges as if they were new).
    t, window, d_head = 4096, 64, 16
    q, k, v = _qkv(gen, 1, t, d_head, dtype=torch.float32)
    blocked_peak, blocked_largest = peak_memory(sliding_window_attention, q, k, v, window, implementation="blocked")
    fused_peak, _ = peak_memory(sliding_window_attention, q, k, v, window, implementation="fused")
    assert blocked_largest >= t * window  # every score of the band, and the masked corners
    assert fused_peak <= 5 * t * d_head * 4  # k and v, the output and its parts: a few (T, Dh) tensors
    assert fused_peak < blocked_peak / 2


def test_memory_tracker_counts_views_once_and_releases():
    with MemoryTracker() as tracker:
        a = torch.zeros(1000)  # 4000 bytes
        b = a.view(10, 100)
        c = torch.ones(500)  # 2000 bytes
        del a, b, c
        d = torch.zeros(250)  # 1000 bytes
    assert tracker.peak_bytes == 6000 and tracker.largest_numel == 1000
    assert tracker.current_bytes == 1000
    del d


def test_score_counts_match_the_masks():
    for t in (1, 10, 100):
        for window in (1, 4, 9, 300):
            for causal in (False, True):
                assert score_counts(t, window=window, causal=causal)["kept"] == int(sliding_window_mask(t, window, causal).sum())
        for dilation in (1, 3, 7, 150):
            counts = score_counts(t, dilation=dilation)
            assert counts["kept"] == counts["computed"] == int(dilated_mask(t, dilation).sum())
            assert score_counts(t, window=5, dilation=dilation)["kept"] == int(dilated_sliding_window_mask(t, 5, dilation).sum())
    card = score_counts(16_384, window=512)
    assert card["dense"] == 268_435_456 and card["kept"] == 16_384 * 513 - 256 * 257
    assert card["kept"] <= card["computed"] < 1.3 * card["kept"]


def test_band_limits():
    assert band_limits(512) == (256, 256)
    assert band_limits(512, causal=True) == (511, 0)


def test_measure_attention_table(gen):
    table = measure_attention([64, 128], lambda q, k, v: sliding_window_attention(q, k, v, 16),
                              lambda t: sliding_window_mask(t, 16), d_head=8, repeats=1)
    assert list(table.index) == [64, 128]
    assert (table["dense_largest"] == table.index**2).all() and (table[["dense_ms", "sparse_ms"]] > 0).all().all()


@pytest.mark.parametrize("call, error, match", [
    (lambda q: sliding_window_attention(q, q, q, 0), ValueError, "window must be >= 1"),
    (lambda q: sliding_window_attention(q, q, q, 2.0), TypeError, "window must be an int"),
    (lambda q: sliding_window_attention(q, q, q, 3, causal=1), TypeError, "causal must be a bool"),
    (lambda q: sliding_window_attention(q, q, q, 3, block_size=0), ValueError, "block_size must be >= 1"),
    (lambda q: sliding_window_attention(q, q, q, 3, implementation="fast"), ValueError, "implementation must be one of"),
    (lambda q: sliding_window_attention(q, q, q, 3, implementation=None), TypeError, "implementation must be a str"),
    (lambda q: sliding_window_attention(q.requires_grad_(), q, q, 3, implementation="fused"), ValueError,
     "cannot backpropagate"),
    (lambda q: dilated_sliding_window_attention(q, q, q, 3, 2, implementation="Flex"), ValueError,
     "implementation must be one of"),
    (lambda q: sliding_window_attention(q, q[:5], q[:5], 3), ValueError, "same length T"),
    (lambda q: sliding_window_attention(q.long(), q, q, 3), TypeError, "q must be a floating-point"),
    (lambda q: sliding_window_attention(q, q.float(), q, 3), TypeError, "share one dtype"),
    (lambda q: sliding_window_attention(q[0], q, q, 3), ValueError, "q must have shape"),
    (lambda q: sliding_window_attention(q, q[..., :2], q, 3), ValueError, "same last dimension"),
    (lambda q: sliding_window_attention(q.expand(2, 8, 4), q.expand(3, 8, 4), q.expand(3, 8, 4), 3), ValueError, "leading dims"),
    (lambda q: dilated_attention(q, q, q, 0), ValueError, "dilation must be >= 1"),
    (lambda q: dilated_attention(q, q, q, None), TypeError, "dilation must be an int"),
    (lambda q: dilated_attention(q, q, q, 2, causal="yes"), TypeError, "causal must be a bool"),
    (lambda q: dilated_sliding_window_attention(q, q, q, 0, 2), ValueError, "window must be >= 1"),
    (lambda q: dilated_sliding_window_mask(8, 3, 0), ValueError, "dilation must be >= 1"),
    (lambda q: score_counts(8), ValueError, "window, a dilation or both"),
    (lambda q: score_counts(0, window=3), ValueError, "t must be >= 1"),
])
def test_bad_inputs(call, error, match):
    q = torch.randn(8, 4, dtype=torch.float64)
    with pytest.raises(error, match=match):
        call(q)


def test_banded_computes_a_band_not_the_dense_matrix():
    """n = 8192, w = 256: the blocked path's matrix products cover a band of keys, not all n.

    Work is counted (FlopCounterMode), not timed: a wall-clock ratio breaks on a busy machine, and
    the benchmarks (benchmarks/run.py) are where speed is measured.
    """
    n, window, head_width = 8192, 256, 64
    q, k, v = torch.randn(3, 1, 1, n, head_width, generator=torch.Generator().manual_seed(0))  # (B, H, T, Dh)
    torch.testing.assert_close(sliding_window_attention(q, k, v, window),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(n, window)),
                               atol=1e-5, rtol=1e-4)
    dense = count_flops(lambda: scaled_dot_product_attention(q, k, v, mask=sliding_window_mask(n, window)))
    # The blocked path, whose matmuls FlopCounterMode sees (the fused CPU kernel is opaque to it).
    banded = count_flops(lambda: sliding_window_attention(q, k, v, window, implementation="blocked"))
    assert dense == 4 * n * n * head_width  # Q K^T and weights @ V, 2 FLOPs per multiply-add
    keys_per_query = banded / (4 * n * head_width)
    assert window <= keys_per_query < n / 4, f"the blocked path computes {keys_per_query:.0f} keys per query"

