"""The GPU budget: bringing proposed worker counts into the [min_num_gpus, max_num_gpus] band
without reversing the direction of a move (Dynamo's guard)."""

from __future__ import annotations

import math


def _in_band(total: int, min_gpus: int, max_gpus: int, tolerance: int) -> bool:
    """Total within [min − tolerance, max] (a negative bound is off)."""
    if max_gpus >= 0 and total > max_gpus:
        return False
    return not (min_gpus >= 0 and total < min_gpus - tolerance)


def clamp_single(desired: int, gpus: int, min_gpus: int, max_gpus: int, min_workers: int) -> int:
    """One pool's replica count brought into the GPU band (0 if even the minimum does not fit)."""
    if (min_gpus < 0 and max_gpus < 0) or gpus <= 0:
        return desired
    tolerance = gpus if min_gpus >= 0 and max_gpus >= 0 else 0
    if _in_band(desired * gpus, min_gpus, max_gpus, tolerance):
        return desired
    if max_gpus >= 0 and desired * gpus > max_gpus:
        return 0 if max_gpus < min_workers * gpus else max(min_workers, max_gpus // gpus)
    return max(min_workers, -(-min_gpus // gpus))


def guard_single(current: int, proposed: int, gpus: int, min_gpus: int, max_gpus: int,
                 min_workers: int) -> tuple[int, str | None]:
    """Apply the GPU band to one pool's proposal without reversing its direction.

    Returns the count and a reason when the budget intervened: ``gpu_budget_reconcile`` (the
    current count is out of band: bring it back), ``gpu_budget_guard_hold`` (at the ceiling and
    asked to grow, at the floor and asked to shrink, or the clamp would reverse the move).
    """
    if gpus <= 0:
        return proposed, None
    tolerance = gpus if min_gpus >= 0 and max_gpus >= 0 else 0
    total = current * gpus
    if not _in_band(total, min_gpus, max_gpus, tolerance):
        return clamp_single(current, gpus, min_gpus, max_gpus, min_workers), "gpu_budget_reconcile"
    if (min_gpus >= 0 and total <= min_gpus and proposed < current) or (
            max_gpus >= 0 and total >= max_gpus and proposed > current):
        return current, "gpu_budget_guard_hold"
    final = clamp_single(proposed, gpus, min_gpus, max_gpus, min_workers)
    if not min(current, proposed) <= final <= max(current, proposed):
        return current, "gpu_budget_guard_hold"
    return final, None


def clamp_pair(p: int, d: int, p_gpus: int, d_gpus: int, min_gpus: int, max_gpus: int,
               p_min: int, d_min: int) -> tuple[int, int]:
    """(prefill, decode) brought into the GPU band proportionally; the minimums always win."""
    if (min_gpus < 0 and max_gpus < 0) or p_gpus <= 0 or d_gpus <= 0:
        return p, d
    total = p * p_gpus + d * d_gpus
    tolerance = max(p_gpus, d_gpus) if min_gpus >= 0 and max_gpus >= 0 else 0
    if _in_band(total, min_gpus, max_gpus, tolerance):
        return p, d
    if max_gpus >= 0 and total > max_gpus:
        if max_gpus < p_min * p_gpus + d_min * d_gpus:
            return 0, 0
        most_p = (max_gpus - d_min * d_gpus) // p_gpus
        new_p = max(p_min, min(most_p, math.floor(p * max_gpus / total)))
        return new_p, max(d_min, (max_gpus - new_p * p_gpus) // d_gpus)
    new_p = max(p_min, math.ceil(p * min_gpus / total) if total > 0 else math.ceil(min_gpus / 2 / p_gpus))
    new_d = max(d, d_min, math.ceil(max(0, min_gpus - new_p * p_gpus) / d_gpus))
    if max_gpus >= 0 and new_p * p_gpus + new_d * d_gpus > max_gpus:
        return p, d
    return new_p, new_d


def guard_pair(current: tuple[int, int], proposed: tuple[int, int], gpus: tuple[int, int],
               min_gpus: int, max_gpus: int, minimums: tuple[int, int]) -> tuple[int, int, str | None]:
    """Apply the GPU band to a disaggregated (prefill, decode) proposal without reversing either
    move; reasons as in `guard_single`."""
    (cp, cd), (pp, pd), (pg, dg), (pmin, dmin) = current, proposed, gpus, minimums
    if pg <= 0 or dg <= 0:
        return pp, pd, None
    if cp < pmin or cd < dmin:
        return (*clamp_pair(max(pp, pmin), max(pd, dmin), pg, dg, min_gpus, max_gpus, pmin, dmin),
                "gpu_budget_reconcile")
    tolerance = max(pg, dg) if max_gpus >= 0 else 0
    total = cp * pg + cd * dg
    if not _in_band(total, min_gpus, max_gpus, tolerance):
        return (*clamp_pair(cp, cd, pg, dg, min_gpus, max_gpus, pmin, dmin), "gpu_budget_reconcile")
    ups, downs = (pp > cp, pd > cd), (pp < cp, pd < cd)
    opposing = (ups[0] and downs[1]) or (downs[0] and ups[1])
    at_floor = min_gpus >= 0 and total <= min_gpus
    at_ceiling = max_gpus >= 0 and total >= max_gpus
    if (at_floor and any(downs) and not any(ups)) or (at_ceiling and any(ups) and not opposing):
        return cp, cd, "gpu_budget_guard_hold"
    if (at_floor or at_ceiling) and opposing:
        fits = _in_band(pp * pg + pd * dg, min_gpus, max_gpus, tolerance)
        return (pp, pd, None) if fits else (cp, cd, "gpu_budget_guard_hold")
    np_, nd = clamp_pair(pp, pd, pg, dg, min_gpus, max_gpus, pmin, dmin)
    kept = min(cp, pp) <= np_ <= max(cp, pp) and min(cd, pd) <= nd <= max(cd, pd)
    if not kept or not _in_band(np_ * pg + nd * dg, min_gpus, max_gpus, tolerance):
        return cp, cd, "gpu_budget_guard_hold"
    return np_, nd, None

