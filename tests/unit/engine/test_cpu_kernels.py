"""The C kernels (small_gemm, paged decode attention) against torch on the same inputs, and on 1 to 3 threads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from services.common.cbuild import why_not_buildable
from services.engine.attention import AttentionMetadata, AttentionSpec, gathered_decode_attention
from services.engine.cpu import glue, paged_attention, small_gemm, team
from services.engine.models.linear import Linear, use_small_gemm

UNBUILDABLE = why_not_buildable()
pytestmark = pytest.mark.skipif(UNBUILDABLE is not None, reason=UNBUILDABLE or "")


def test_every_kernel_builds_where_a_compiler_exists() -> None:
    """A kernel that fails to compile must fail here: the product would quietly fall back to torch."""
    assert small_gemm.available(), "small_gemm.c did not build (see the warning logged above)"
    assert paged_attention.available(), "paged_attention.c did not build (see the warning logged above)"
    assert glue.takes(torch.randn(1, 8)), "glue.c did not build (see the warning logged above)"


@pytest.mark.parametrize("m,k,n", [(1, 512, 1408), (3, 13, 7), (32, 1408, 512), (5, 8, 1), (2, 7, 100)])
@pytest.mark.parametrize("bias", [False, True])
def test_small_gemm_equals_torch(m: int, k: int, n: int, bias: bool) -> None:
    gen = torch.Generator().manual_seed(m * 1000 + k + n)
    x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    got = small_gemm.small_gemm(x, w.t().contiguous(), b)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)


def test_small_gemm_row_does_not_depend_on_the_batch() -> None:
    """Rows go through the kernel four, two or one at a time: each row's result is bit for bit the same at any M."""
    gen = torch.Generator().manual_seed(7)
    x, w_t = torch.randn(small_gemm.MAX_ROWS, 136, generator=gen), torch.randn(136, 40, generator=gen)
    whole = small_gemm.small_gemm(x, w_t, None)
    for rows in range(1, 10):
        assert torch.equal(small_gemm.small_gemm(x[:rows].contiguous(), w_t, None), whole[:rows])
    assert torch.equal(small_gemm.small_gemm(x[5:8].contiguous(), w_t, None), whole[5:8])


def test_small_gemm_takes_only_what_it_computes() -> None:
    w_t = torch.randn(16, 8)
    assert small_gemm.takes_dtype(w_t) and not small_gemm.takes_dtype(w_t.double())
    assert not small_gemm.takes_dtype(w_t.bfloat16())  # bf16 weights stay row-major, as transformers keeps them
    assert small_gemm.takes_input(torch.randn(small_gemm.MAX_ROWS, 16))
    assert not small_gemm.takes_input(torch.randn(small_gemm.MAX_ROWS + 1, 16))
    assert not small_gemm.takes_input(torch.randn(16, 2).t())  # not contiguous
    assert not small_gemm.takes_input(torch.randn(1, 2, 16))


def test_linear_equals_torch_at_every_batch() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Linear(24, 40), nn.ReLU(), Linear(40, 9, bias=False))
    x = torch.randn(70, 24)
    expected = model(x)
    use_small_gemm(model)
    assert model[0].small and model[2].small
    for rows in (1, 2, small_gemm.MAX_ROWS, 70):  # the kernel up to MAX_ROWS, MKL above
        torch.testing.assert_close(model(x[:rows]), expected[:rows], rtol=1e-5, atol=1e-5)


def _decode_case(batch: int, heads: int, kv_heads: int, lens: list[int], seed: int):
    gen = torch.Generator().manual_seed(seed)
    bs, d, layers = 16, 64, 3
    width = max(-(-n // bs) for n in lens)
    pool = torch.randn(batch * width + 7, layers, 2, kv_heads, bs, d, generator=gen)
    table = torch.randperm(pool.shape[0], generator=gen)[: batch * width].view(batch, width)
    q = torch.randn(batch, heads, d, generator=gen)
    meta = AttentionMetadata([1] * batch, [n - 1 for n in lens], table.tolist(), torch.zeros(batch), torch.zeros(batch),
                             decode_table=table, decode_lens=torch.tensor(lens))
    return q, pool[:, 1], meta  # a middle layer: its blocks are strided in the pool


@pytest.mark.parametrize("heads,kv_heads", [(8, 4), (4, 4), (8, 1)])
@pytest.mark.parametrize("lens", [[1], [16], [17, 3, 160, 48], [1, 33] * 8])
def test_paged_decode_attention_equals_gathered(heads: int, kv_heads: int, lens: list[int]) -> None:
    q, cache, meta = _decode_case(len(lens), heads, kv_heads, lens, seed=heads + kv_heads + len(lens))
    assert paged_attention.takes(q, cache)
    got = paged_attention.paged_decode_attention(q, cache, meta.decode_table, meta.decode_lens, 0.125)
    torch.testing.assert_close(got, gathered_decode_attention(q, cache, meta, AttentionSpec(0.125)), rtol=1e-5, atol=1e-5)


def _windowed_reference(q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, spec: AttentionSpec) -> torch.Tensor:
    """Each sequence alone: its last `window` keys in order, scores capped, softmax, as transformers' eager path."""
    outs = []
    for b, n in enumerate(meta.decode_lens.tolist()):
        kv = cache[meta.decode_table[b]].permute(1, 2, 0, 3, 4).flatten(2, 3)[:, :, :n]  # [2, KVH, n, D]
        k, v = (x[:, max(0, n - spec.window):].repeat_interleave(q.shape[1] // x.shape[0], 0) for x in kv)
        scores = torch.einsum("hd,hkd->hk", q[b], k) * spec.scale
        scores = torch.tanh(scores / spec.softcap) * spec.softcap if spec.softcap else scores
        outs.append(torch.einsum("hk,hkd->hd", scores.softmax(-1), v))
    return torch.stack(outs)


@pytest.mark.parametrize("window,softcap", [(20, None), (16, None), (5, 2.0), (1000, 1.5)])
def test_sliding_window_and_softcap_read_only_their_keys(window: int, softcap: float | None) -> None:
    """The kernel and the torch path (which gathers only the window's blocks) against each sequence alone."""
    q, cache, meta = _decode_case(4, 8, 2, [17, 3, 160, 48], seed=window)
    spec = AttentionSpec(0.125, window, softcap)
    want = _windowed_reference(q, cache, meta, spec)
    got = paged_attention.paged_decode_attention(q, cache, meta.decode_table, meta.decode_lens, 0.125, window, softcap)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered_decode_attention(q, cache, meta, spec), want, rtol=1e-5, atol=1e-5)


def test_paged_decode_attention_ignores_peaked_scores() -> None:
    """Scores far below the maximum give zero weight (not subnormal ones), as softmax in torch does."""
    q, cache, meta = _decode_case(2, 8, 4, [40, 70], seed=7)
    q = q * 200  # logits spread over thousands: most weights underflow
    got = paged_attention.paged_decode_attention(q, cache, meta.decode_table, meta.decode_lens, 0.125)
    torch.testing.assert_close(got, gathered_decode_attention(q, cache, meta, AttentionSpec(0.125)), rtol=1e-4, atol=1e-4)


def test_paged_decode_attention_declines_other_dtypes_and_layouts() -> None:
    q, cache, _ = _decode_case(2, 8, 4, [5, 9], seed=1)
    assert not paged_attention.takes(q.double(), cache.double())
    assert not paged_attention.takes(q, cache.transpose(2, 3))


@pytest.fixture
def threads() -> Iterator[None]:
    """Each test sets its own team; afterwards the process is back on one thread."""
    yield
    team.set_team(1)


def test_small_gemm_result_does_not_depend_on_the_thread_count(threads) -> None:
    """Threads take slices of the columns (N = 300 leaves a ragged last one): every element bit for bit as on one."""
    gen = torch.Generator().manual_seed(11)
    x, w_t, b = torch.randn(5, 200, generator=gen), torch.randn(200, 300, generator=gen), torch.randn(300, generator=gen)
    team.set_team(1)
    alone = small_gemm.small_gemm(x, w_t, b)
    for count in (2, 3):
        team.set_team(count)
        assert torch.equal(small_gemm.small_gemm(x, w_t, b), alone)
        assert torch.equal(small_gemm.small_gemm(x[3:4].contiguous(), w_t, b), alone[3:4])


def test_paged_decode_attention_does_not_depend_on_the_thread_count_or_the_batch(threads) -> None:
    q, cache, meta = _decode_case(4, 8, 4, [17, 3, 160, 48], seed=5)
    table, lens = meta.decode_table, meta.decode_lens
    for window, softcap in ((None, None), (20, 2.0)):
        team.set_team(1)
        alone = paged_attention.paged_decode_attention(q, cache, table, lens, 0.125, window, softcap)
        for count in (2, 3):
            team.set_team(count)
            assert torch.equal(paged_attention.paged_decode_attention(q, cache, table, lens, 0.125, window, softcap), alone)
            one = paged_attention.paged_decode_attention(q[2:3], cache, table[2:3], lens[2:3], 0.125, window, softcap)
            assert torch.equal(one, alone[2:3])


def _status(task: Path) -> str:
    """A thread's /proc status, empty if the thread ended since it was listed."""
    try:
        return (task / "status").read_text()
    except FileNotFoundError:
        return ""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_kernels_run_on_torchs_pool_with_the_workers_pinned(threads) -> None:
    """One OpenMP runtime in the process (no second pool beside torch's), and a kernel's worker runs on its core."""
    core = max(os.sched_getaffinity(0))
    team.set_team(2, (core, core))
    small_gemm.small_gemm(torch.randn(1, 256), torch.randn(256, 256), None)
    libraries = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libgomp" in line}
    assert len(libraries) == 1, libraries
    pinned = [task for task in Path("/proc/self/task").iterdir() if f"Cpus_allowed_list:\t{core}\n" in _status(task)]
    assert pinned, "no thread of the team was pinned to its core"


def test_glue_equals_torch_and_a_row_does_not_depend_on_the_batch() -> None:
    gen = torch.Generator().manual_seed(3)
    x, w, gate_up = torch.randn(9, 300, generator=gen), torch.randn(300, generator=gen), torch.randn(9, 2 * 70, generator=gen)
    torch.testing.assert_close(glue.rms_norm(x, w, 1e-5), F.rms_norm(x, (300,), w, 1e-5), rtol=1e-6, atol=1e-6)
    gate, up = gate_up.split([70, 70], -1)
    torch.testing.assert_close(glue.silu_mul(gate, up), F.silu(gate) * up, rtol=1e-6, atol=1e-6)
    assert torch.equal(glue.rms_norm(x[4:5].contiguous(), w, 1e-5), glue.rms_norm(x, w, 1e-5)[4:5])
    assert torch.equal(glue.silu_mul(gate[4:5], up[4:5]), glue.silu_mul(gate, up)[4:5])
    assert not glue.takes(torch.randn(small_gemm.MAX_ROWS + 1, 8)) and not glue.takes(x.double())
