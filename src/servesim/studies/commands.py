"""The `servesim validate` and `servesim calibrate` subcommands.

Exit codes as for `predict`: 0 success, 2 usage or configuration errors (a missing data
folder, a bad option), 1 when a run or a measurement file fails (the message names the file
and line).
"""

from __future__ import annotations

import argparse
import sys

from servesim.cli.common import write_stdout
from servesim.errors import ConfigError, RunError


def register(sub: argparse._SubParsersAction) -> None:
    """Add `validate` and `calibrate` to the `servesim` command."""
    from servesim.cli.common import add_compat_argument

    validate = sub.add_parser("validate", help="compare --compat reference and the defaults with real vLLM runs")
    validate.add_argument("--data", default=None, help="the LLMServingSim validation data folder (default: the "
                          "open measurement pack shipped with servesim; a full copy adds --components' profiles)")
    validate.add_argument("--aic-systems-path", default=None,
                          help="AIConfigurator systems directory with vLLM 0.19.0 data (default: "
                               "$SERVESIM_AIC_SYSTEMS_PATH, else servesim's default, the reference's database)")
    validate.add_argument("--runs", default=None, help="comma-separated run numbers (1-4) to validate")
    validate.add_argument("-o", "--output", default=None,
                          help="write the Markdown tables here (between '<!-- servesim validate: begin/end -->' "
                               "markers if the file has them)")
    validate.add_argument("--summary", action="store_true",
                          help="only the mean-error table (and the hold-out with --holdout): docs/accuracy.md's form")
    validate.add_argument("--components", action="store_true",
                          help="also check the timing model's pieces against the splitwise and Vidur measurements, "
                               "and its decode steps against the runs' drain")
    validate.add_argument("--holdout", action="store_true",
                          help="also calibrate on part of the data and predict the rest (takes minutes)")
    validate.add_argument("--points", default=None,
                          help="a benchmark-point CSV (InferenceX's form, docs/accuracy.md): validate its points "
                               "instead of the open vLLM runs")
    validate.add_argument("--max-requests", type=int, default=None,
                          help="with --points: replay at most this many requests of each point (quicker, noisier)")
    validate.set_defaults(run_command=_validate)

    calibrate = sub.add_parser("calibrate", help="fit a calibration file to measurements of a real deployment")
    calibrate.add_argument("-c", "--config", required=True, help="YAML config of the measured deployment")
    calibrate.add_argument("-m", "--measurements", required=True, action="append",
                           help="per-request measurements of one run: LLMServingSim JSONL, AIPerf "
                                "profile_export.jsonl or a vllm bench serve --save-detailed JSON; repeat for "
                                "runs at other loads or prompt lengths (they let the fit separate prefill "
                                "time from front-end latency)")
    calibrate.add_argument("--format", choices=("auto", "llmservingsim", "aiperf", "vllm"), default="auto")
    calibrate.add_argument("-o", "--output", required=True, help="calibration file to write (YAML)")
    add_compat_argument(calibrate)
    calibrate.add_argument("--keep-traffic", action="store_true",
                           help="replay the config's own traffic section (the measured requests in their order, e.g. a "
                                "trace with the prompt prefixes they share) instead of the measured requests, "
                                "each with a private prompt")
    calibrate.add_argument("--no-holdout", action="store_true",
                           help="skip the hold-out check (a fit on part of the data predicting the rest)")
    calibrate.set_defaults(run_command=_calibrate)


def _fail(code: int, message: str) -> int:
    print(f"servesim: error: {message}", file=sys.stderr)
    return code


def _scratch_problem(exc: OSError) -> str:
    from servesim.outputs import os_reason

    where = f" {exc.filename}" if exc.filename else ""
    return f"cannot write the scratch file{where}: {os_reason(exc)}"


def _selected_runs(text: str | None):
    from servesim.studies.openruns import RUNS

    if text is None:
        return RUNS
    try:
        picks = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--runs {text!r}: expected comma-separated numbers 1-{len(RUNS)}") from None
    bad = [p for p in picks if not 1 <= p <= len(RUNS)]
    if bad:
        raise ConfigError(f"--runs: no run {bad[0]} (there are {len(RUNS)})")
    return tuple(RUNS[p - 1] for p in picks)


def _validate_points(args: argparse.Namespace) -> int:
    from servesim.measured import benchmark
    from servesim.measured.points import read_points
    from servesim.output_file import OutputFile
    from servesim.studies.validate import section_text

    if args.max_requests is not None and args.max_requests < 1:
        return _fail(2, f"--max-requests {args.max_requests}: must be >= 1")
    target = OutputFile("-o", args.output) if args.output else None
    try:
        existing = target.check(read_existing=True) if target is not None else None
        points = read_points(args.points)
        results = benchmark.validate_points(points, args.max_requests, progress=sys.stderr.isatty())
    except ConfigError as exc:
        return _fail(2, str(exc))
    except RunError as exc:
        return _fail(1, str(exc))
    text = benchmark.render(results)
    code = write_stdout("validate", text)
    if target is not None:
        try:
            target.write(section_text(existing, "servesim validate points", text))
        except RunError as exc:
            return _fail(1, str(exc))
    return code


def _validate(args: argparse.Namespace) -> int:
    from servesim.studies import openruns, validate
    from servesim.output_file import OutputFile

    if args.points is not None:
        return _validate_points(args)
    data = openruns.data_folder(args.data)
    target = OutputFile("-o", args.output) if args.output else None
    try:
        runs = _selected_runs(args.runs)
        existing = target.check(read_existing=True) if target is not None else None
    except ConfigError as exc:
        return _fail(2, str(exc))
    missing = [str(p) for run in runs for p in run.files(data) if not p.is_file()]
    if missing:
        return _fail(2, f"--data {data}: not the LLMServingSim validation data (missing {missing[0]})")
    try:
        results = validate.validate(data, args.aic_systems_path, runs, progress=sys.stderr.isatty())
        text = validate.render(results, detail=not args.summary)
        if args.components:
            from servesim.studies import components, decode, profiles, steps

            text += "\n" + components.render(components.check(data.parent, args.aic_systems_path))
            text += "\n" + profiles.render(profiles.check(data / "profiler" / "perf", args.aic_systems_path))
            text += "\n" + decode.render(*decode.check(data.parent, args.aic_systems_path))
            bands = [band for run in runs for waiting in (False, True)
                     for band in steps.compare(run, data, args.aic_systems_path, waiting)]
            text += "\n" + steps.render(bands)
        if args.holdout:
            from servesim.studies import holdout

            progress = sys.stderr.isatty()
            text += "\n" + holdout.render(holdout.by_load(data, args.aic_systems_path, runs, progress),
                                          "Calibrated on a run's first third of requests, predicting the rest")
            if not args.summary:
                text += "\n" + holdout.render(holdout.by_model(data, args.aic_systems_path, progress=progress),
                                              "Calibrated on one run, predicting another on the same GPU type")
    except RunError as exc:
        return _fail(1, str(exc))
    except OSError as exc:  # a scratch file of the replays (a full disk)
        return _fail(1, _scratch_problem(exc))
    code = write_stdout("validate", text)
    if target is not None:
        try:
            target.write(validate.section_text(existing, "servesim validate", text))
        except RunError as exc:
            return _fail(1, str(exc))
    return code


def _calibrate(args: argparse.Namespace) -> int:
    from servesim.cli.common import compat_overrides
    from servesim.config import load_config
    from servesim.studies.calibrate import calibrate
    from servesim.measured import load_measured
    from servesim.output_file import OutputFile

    try:
        config = load_config(args.config, compat_overrides(args))
    except ConfigError as exc:
        message = str(exc)
        return _fail(2, message if message.startswith(f"{args.config}:") else f"{args.config}: {message}")
    target = OutputFile("-o", args.output)
    try:
        target.check()
        measured = [load_measured(path, args.format) for path in args.measurements]
        progress = sys.stderr.isatty()
        code = 0
        if not args.no_holdout:
            from servesim.studies import holdout

            check = holdout.render_check(holdout.check(config, measured, args.keep_traffic, progress))
            code = write_stdout("calibrate", check)
        result = calibrate(config, measured, keep_traffic=args.keep_traffic, progress=progress)
        code = write_stdout("calibrate", result.describe()) or code
        for note in result.notes:
            if note.startswith("warning:"):
                print(f"servesim: {note}", file=sys.stderr)
        target.write(result.calibration.to_yaml())
    except ConfigError as exc:
        return _fail(2, str(exc))
    except RunError as exc:
        return _fail(1, str(exc))
    except OSError as exc:  # a scratch file of the replays (a full disk)
        return _fail(1, _scratch_problem(exc))
    print(f"wrote {args.output}", file=sys.stderr)
    return code
