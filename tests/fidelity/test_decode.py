"""The decode checks: what the open data says about decode at large batch × context."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servesim.studies import decode

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.parametrize("tokens", [32, 128, 512])
def test_busiest_expert_of_a_top2_routing(tokens):
    """Against a simulation of top-2 routing (two distinct experts per token) over 8 experts."""
    rng = np.random.default_rng(7)
    picks = np.argsort(rng.random((4000, tokens, 8)), axis=2)[:, :, :2]
    loads = np.stack([np.bincount(p.ravel(), minlength=8) for p in picks])
    assert decode.busiest_expert_load(2 * tokens, 8) == pytest.approx(loads.max(axis=1).mean(), rel=0.04)
    assert decode.busiest_expert_load(256, 1) == pytest.approx(256, rel=1e-6)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not present")
def test_the_open_data_does_not_show_an_under_costed_kv_read():
    growth, attention, moe = decode.check(SHARED)
    by = {(tp, b): (real, aic, kv) for tp, b, real, aic, kv in growth}
    # Splitwise: the extra time of batch 64 is 10-40x a second read of its KV, and larger at
    # TP4/TP8 than at TP2, although each GPU reads half the KV per doubling of TP
    for tp in (4, 8):
        real, aic, kv = by[(tp, 64)]
        assert real > 10 * kv and real > by[(2, 64)][0]
    # vLLM's own decode attention on the RTX PRO 6000: AIConfigurator within 10 % once a layer's
    # KV is well beyond the GPU's 128 MB L2, up to ~40 % faster while it fits
    big = [r for n, kv, mib, r in attention if mib >= 512]
    small = [r for n, kv, mib, r in attention if 16 <= mib <= 128]
    assert all(0.9 <= r <= 1.05 for r in big) and max(small) < 0.85
    # MoE: AIConfigurator's power-law rows already cost more than balanced routing at decode sizes
    if moe:
        assert all(p >= b * 0.99 for _, b, p, _ in moe)
        assert next(x for t, _, _, x in moe if t == 128) == pytest.approx(1.24, abs=0.03)
    rendered = decode.render(growth, attention, moe)
    assert "extra KV read per GPU" in rendered and "| 128 | 1024 |" in rendered
