"""The library leaves its caller's process alone: after `servesim.simulate` (and the other
public calls) return, the caller's garbage collector, frozen objects, modules and `re` cache
are as the caller left them. Each case runs in a fresh interpreter, as a caller's program would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

CONFIG = {
    "engine": {
        "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 32768,
        "workers": {"aggregated": {
            "parallelism": {"replicas": 1, "tensor": 1},
            "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256},
            "kv_cache": {"block_size": 64, "capacity": {"type": "fixed", "blocks": 12000}},
            "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}},
    },
    "traffic": {
        "source": {"type": "synthetic", "input_tokens": 128, "output_tokens": 16},
        "load": {"type": "poisson", "requests_per_second": 10, "seed": 1},
        "stop": {"requests": 40},
    },
}

PROBE = textwrap.dedent("""\
    import gc, json, re, sys
    import yaml  # the caller's own import: PyYAML compiles its pattern the ordinary way
    enabled = sys.argv[2] == "enabled"
    config = sys.argv[1]  # a YAML file (JSON is YAML)
    import servesim
    servesim.load_config(config)          # imports done, so what follows compares like with like
    servesim.simulate(config)
    gc.collect()
    sentinels = [[i] for i in range(5000)]
    gc.freeze()
    gc.set_threshold(1234, 7, 9)
    (gc.enable if enabled else gc.disable)()
    ids = {id(s) for s in sentinels}
    before = [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count()]
    report = servesim.simulate(config)
    servesim.load_config(config)
    after = [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count()]
    unfrozen = sum(id(o) in ids for o in gc.get_objects())   # frozen objects are in no generation
    stand_ins = [n for n, m in list(sys.modules.items()) if getattr(m, "__servesim_stand_in__", False)]
    # `re` files each pattern under its own text; a stand-in program filed under another's breaks that
    misfiled = [key[1] for key, compiled in re._cache.items() if compiled.pattern != key[1]]
    requests = report["request_count"] if "request_count" in report.summary else None
    del report
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    garbage = len(gc.garbage)
    print(json.dumps({
        "before": before, "after": after, "unfrozen": unfrozen, "stand_ins": stand_ins,
        "misfiled": misfiled,
        "garbage": garbage, "requests": requests,
    }))
    """)


def _probe(state: str, folder: Path) -> dict[str, Any]:
    config = folder / "config.yaml"
    config.write_text(json.dumps(CONFIG))
    done = subprocess.run([sys.executable, "-c", PROBE, str(config), state],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("state", ["enabled", "disabled"])
def test_simulate_restores_the_callers_collector_and_keeps_its_frozen_objects(state: str, tmp_path: Path) -> None:
    seen = _probe(state, tmp_path)
    assert seen["before"][:2] == [state == "enabled", [1234, 7, 9]]
    assert seen["after"] == seen["before"]  # enabled flag, thresholds and freeze count unchanged
    assert seen["unfrozen"] == 0            # none of the caller's frozen objects came back
    assert seen["requests"] in (None, 40)


def test_simulate_leaves_no_garbage_cycles_for_the_callers_collector(tmp_path: Path) -> None:
    assert _probe("enabled", tmp_path)["garbage"] == 0


def test_simulate_leaves_no_module_stand_in_and_re_s_cache_as_python_filled_it(tmp_path: Path) -> None:
    seen = _probe("enabled", tmp_path)
    assert seen["stand_ins"] == []
    assert seen["misfiled"] == []
