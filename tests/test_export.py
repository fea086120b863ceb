"""Export: which trial is picked (SLOs, none qualify), quoting, and YAML that vLLM accepts."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml
from results_fixtures import PARAMS, build_study, write_study_file

from tuner.errors import UserError
from tuner.measure.mixes import objective_of
from tuner.results.best import best_report
from tuner.results.export import render, shell_command, vllm_config
from tuner.results.selection import judge, select_trial, slo_violation
from tuner.spec.slo import parse_slo
from tuner.spec.study import load_study_spec
from tuner.store.storage import Store, spec_of
from tuner.trial import StudyRecord
from tuner.trial import read as trial_point
from tuner_testing import vllm_run


@pytest.fixture
def stored(tmp_path: Path):
    study_file, url = build_study(tmp_path)
    store = Store(url)
    study = store.load_study(load_study_spec(study_file).name)
    yield study, spec_of(study), [trial_point(t) for t in study.get_trials()]
    store.close()


def test_no_slo_picks_best_scoring_feasible_trial(stored) -> None:
    _, _, points = stored
    # Trial 3 scores best (-0.5) but breaks the study's SLO; failed trial 4 never counts.
    choice = select_trial(points, "handbuilt")
    assert choice.point.number == 6
    assert "5 feasible" in choice.why


def test_slo_given_replaces_the_study_slo(stored) -> None:
    _, _, points = stored
    assert select_trial(points, "s", limits=parse_slo("p99_ttft_ms<=1000")).point.number == 1
    choice = select_trial(points, "s", limits=parse_slo("p99_ttft_ms<=1600,mean_tpot_ms<=72"))
    assert choice.point.number == 0
    assert "1 of 6 measured trials meeting p99_ttft_ms<=1600,mean_tpot_ms<=72" in choice.why
    # Throughput limits are lower bounds.
    both = parse_slo("output_throughput>=1250,p99_ttft_ms<=2000")
    assert select_trial(points, "s", limits=both).point.number == 6
    # Trial 3 breaks only the study file's p99 TTFT limit: under a TPOT-only SLO it is the
    # best-scoring trial. The failed trial 4 (best "metrics" of all: none) never counts.
    assert select_trial(points, "s", limits=parse_slo("mean_tpot_ms<=80")).point.number == 3


def test_none_qualify_names_the_closest_trial(stored) -> None:
    _, _, points = stored
    limits = parse_slo("p99_ttft_ms<=1000,mean_tpot_ms<=45")
    # Relative violations: trial 1: 0 + 30/45; trial 6: 0.8 + 5/45; trial 0: 0.5 + 25/45.
    with pytest.raises(UserError, match=r"meets .*; closest is trial 1 \(p99_ttft_ms=900"):
        select_trial(points, "s", limits=limits)
    by_number = {p.number: p for p in points}
    assert slo_violation(by_number[1], limits) == pytest.approx(30 / 45)
    assert slo_violation(by_number[6], limits) == pytest.approx(0.8 + 5 / 45)


def test_confirmed_configs_rank_by_their_mean_score(stored) -> None:
    _, spec, points = stored
    six = next(p for p in points if p.number == 6)

    def rerun(number: int, score: float):
        return replace(six, number=number, score=score, attrs={**six.attrs, "confirm_of": 6})

    lucky = [*points, rerun(8, -0.9)]
    # A re-run is never a candidate; trial 6 ranks by the mean of -0.4 and -0.9.
    assert select_trial(lucky, "s").point.number == 6
    # Trial 6 scored -0.4 once, but its confirmation runs average +0.03: trial 1 (-0.3) wins.
    unlucky = [*points, rerun(8, 0.2), rerun(9, 0.3)]
    assert select_trial(unlucky, "s").point.number == 1
    confirmed = [*points, rerun(8, -0.5), rerun(9, -0.3)]
    choice = select_trial(confirmed, "s")
    assert choice.point.number == 6 and choice.scores == (-0.4, -0.5, -0.3)
    choice = judge(choice, confirmed, spec, objective_of(spec), None, None)
    text = render("shell", spec, choice, "s", simulated=False)
    assert "# note: confirmed over 3 runs: score -0.400 ± 0.100 (std)" in text


def test_explicit_trial_and_its_errors(stored) -> None:
    _, _, points = stored
    assert select_trial(points, "s", trial=7).point.number == 7
    assert "WARNING" in select_trial(points, "s", trial=3).why  # breaks the study's SLO
    with pytest.raises(UserError, match="has no trial 42 \\(trials: 0–7\\)"):
        select_trial(points, "s", trial=42)
    with pytest.raises(UserError, match="trial 4 failed \\(kv_cache_too_small"):
        select_trial(points, "s", trial=4)
    with pytest.raises(UserError, match="trial 5 failed"):
        select_trial(points, "s", trial=5)
    with pytest.raises(UserError, match="trial 7 does not meet the SLO: p99_ttft_ms=1900"):
        select_trial(points, "s", trial=7, limits=parse_slo("p99_ttft_ms<=1000"))


def test_unstored_metric_and_empty_study(stored, tmp_path: Path) -> None:
    _, _, points = stored
    with pytest.raises(UserError, match="'p95_ttft_ms' is not stored"):
        select_trial(points, "s", limits=parse_slo("p95_ttft_ms<=10"))
    with pytest.raises(UserError, match="has no complete trial"):
        select_trial([], "s")


def test_all_infeasible_names_closest(tmp_path: Path) -> None:
    _, url = build_study(tmp_path, trials={3: (2500.0, 40.0, 1.0, 0.0, "slo")})
    store = Store(url)
    points = [trial_point(t) for t in store.load_study("handbuilt").get_trials()]
    store.close()
    # Trials are numbered as added: this study's only trial is trial 0.
    closest = "closest is trial 0 (breaks p99_ttft_ms<=2000: p99_ttft_ms=2500)"  # and its figure
    with pytest.raises(
        UserError, match=re.escape(f"no feasible trial in study 'handbuilt'; {closest}")
    ):
        select_trial(points, "handbuilt")
    # `tuner best` names it too (it said "has no complete feasible trial yet" alone)
    record = StudyRecord(spec=load_study_spec(write_study_file(tmp_path)).model_dump(mode="json"))
    with pytest.raises(UserError, match=re.escape(f"no complete feasible trial yet; {closest}")):
        best_report(points, "handbuilt", record)


def test_shell_command_quotes_awkward_paths_and_round_trips(stored) -> None:
    _, spec, _ = stored
    params = PARAMS[2]
    text = shell_command(spec, params)
    assert text.startswith("VLLM_LOGGING_LEVEL='DEBUG info' VLLM_CPU_KVCACHE_SPACE=3 vllm serve ")
    words = shlex.split(text.replace("\\\n", " "))
    env = dict(w.split("=", 1) for w in words[:2])
    assert env == {"VLLM_LOGGING_LEVEL": "DEBUG info", "VLLM_CPU_KVCACHE_SPACE": "3"}
    argv = words[2:]
    assert argv[:3] == ["vllm", "serve", '/mnt/My Models/Qwen 32B\'s "dir"']
    assert argv[argv.index("--chat-template") + 1] == "templates/qwen 32 'no think' $HOME.jinja"
    assert "--no-enable-chunked-prefill" in argv and "--max-num-seqs" in argv
    assert "--load-format" not in argv  # the study dropped it for production
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"
    # Run it through a real shell: the words arrive intact, and $HOME is not expanded.
    out = subprocess.run(
        ["bash", "-c", text.replace("vllm serve", "printf '%s\\n' vllm serve", 1)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"], "HOME": "/root"},
    ).stdout.splitlines()
    assert out == argv


def test_yaml_loads_back_to_the_same_flags(stored) -> None:
    _, spec, points = stored
    choice = select_trial(points, "handbuilt", trial=2)
    text = render("yaml", spec, choice, "handbuilt", simulated=False)
    cfg = yaml.safe_load(text)
    assert cfg["model"] == '/mnt/My Models/Qwen 32B\'s "dir"'
    assert cfg["max-num-seqs"] == 32 and cfg["block-size"] == 32
    assert cfg["gpu-memory-utilization"] == 0.8 and cfg["tensor-parallel-size"] == 4
    assert cfg["no-enable-chunked-prefill"] is True and "enable-chunked-prefill" not in cfg
    assert cfg["chat-template"] == "templates/qwen 32 'no think' $HOME.jinja"
    assert "load-format" not in cfg
    assert cfg == vllm_config(spec, PARAMS[2])
    # Converting back to argv the way vLLM's config loader does gives the shell export's flags.
    back = []
    for key, value in cfg.items():
        back += [f"--{key}"] if value is True else [f"--{key}", str(value)]
    argv = shlex.split(shell_command(spec, PARAMS[2]).replace("\\\n", " "))[5:]
    assert _pairs(back[2:]) == _pairs(argv)
    assert "# run with: VLLM_LOGGING_LEVEL='DEBUG info' VLLM_CPU_KVCACHE_SPACE=3 vllm serve" in text
    assert "#   p99_ttft_ms = 900 (95% CI 810–990)" in text


def _pairs(argv: list[str]) -> set[tuple[str, ...]]:
    out, i = set(), 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.add((argv[i], argv[i + 1]))
            i += 2
        else:
            out.add((argv[i],))
            i += 1
    return out


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
def test_vllm_serve_parser_reads_the_yaml_like_the_shell_command(
    stored, tmp_path: Path, vllm_python: Path
) -> None:
    """vLLM's own `vllm serve` parser gives the same namespace from `--config` and from argv."""
    _, spec, points = stored
    numbers = (0, 2)  # chunked prefill on, then off
    cases = []
    for number in numbers:
        choice = select_trial(points, "handbuilt", trial=number)
        cfg = tmp_path / f"t{number}.yaml"
        cfg.write_text(render("yaml", spec, choice, "handbuilt", simulated=False))
        argv = shlex.split(shell_command(spec, PARAMS[number]).replace("\\\n", " "))[3:]
        cases.append([str(cfg), argv])
    # one command for both
    script = (
        "import json, sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.entrypoints.cli.serve import ServeSubcommand\n"
        "def ns(args):\n"
        "    p = FlexibleArgumentParser()\n"
        "    ServeSubcommand().subparser_init(p.add_subparsers(dest='subparser'))\n"
        "    d = vars(p.parse_args(args))\n"
        "    d['model'] = d.pop('model_tag') or d['model']\n"
        "    return {k: repr(v) for k, v in d.items() if k != 'config'}\n"
        "cases = json.loads(sys.argv[1])\n"
        "print(json.dumps([[ns(['serve', '--config', c]), ns(a)] for c, a in cases]))\n"
    )
    done = vllm_run([str(vllm_python), "-c", script, json.dumps(cases)])
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(parsed) == len(numbers)
    for number, (from_config, from_argv) in zip(numbers, parsed, strict=True):
        assert from_config == from_argv
        assert from_config["enable_chunked_prefill"] == repr(number == 0)
        assert from_config["max_num_seqs"] == repr(PARAMS[number]["max-num-seqs"])


def test_json_export_holds_params_metrics_version_and_study(stored) -> None:
    _, spec, points = stored
    choice = select_trial(points, "handbuilt")
    baseline = next(p for p in points if p.baseline)
    doc = json.loads(render("json", spec, choice, "handbuilt", simulated=False, baseline=baseline))
    assert doc["study"] == "handbuilt" and doc["trial"] == 6
    assert doc["vllm_version"] == "0.10.1.1" and doc["figures"] == "measured"
    assert doc["params"] == PARAMS[6]
    assert doc["metrics"]["p99_ttft_ms"] == 1800.0
    assert doc["metric_ci"]["p99_ttft_ms"] == pytest.approx([1620.0, 1980.0])
    assert doc["baseline_metrics"]["p99_ttft_ms"] == 1500.0
    assert doc["command"][:3] == ["vllm", "serve", '/mnt/My Models/Qwen 32B\'s "dir"']
    assert doc["env"]["VLLM_CPU_KVCACHE_SPACE"] == "6"


def test_simulated_exports_say_predicted(tmp_path: Path) -> None:
    _, url = build_study(tmp_path, simulated=True)
    store = Store(url)
    study = store.load_study("handbuilt-simulated")
    points = [trial_point(t) for t in study.get_trials()]
    choice = select_trial(points, study.study_name)
    for fmt in ("shell", "yaml"):
        text = render(fmt, spec_of(study), choice, study.study_name, simulated=True)
        assert "# figures PREDICTED by the tuner's simulator, not measured" in text
    doc = json.loads(render("json", spec_of(study), choice, study.study_name, simulated=True))
    assert doc["simulated"] is True and doc["figures"] == "predicted by the simulator"
    store.close()


def test_multi_objective_study_selects_by_score_too(tmp_path: Path) -> None:
    _, url = build_study(tmp_path, mode="multi")
    store = Store(url)
    study = store.load_study("handbuilt")
    assert len(study.directions) == 3
    assert study.directions[2] == optuna.study.StudyDirection.MAXIMIZE
    points = [trial_point(t) for t in study.get_trials()]
    assert select_trial(points, "handbuilt").point.number == 6
    store.close()


def test_a_study_whose_every_trial_failed_says_so(tmp_path: Path) -> None:
    """Only failed trials: `best` and `pareto` say nothing was measured, not "no complete
    feasible trial yet" alone or "metric 'p99_ttft_ms' is not stored (stored: none)"."""
    from tuner.results.pareto import check_stored

    failed = {0: (0.0, 0.0, 0.0, 10.0, "failed"), 1: (0.0, 0.0, 0.0, 0.0, "FAIL")}
    _, url = build_study(tmp_path, trials=failed)
    store = Store(url)
    points = [trial_point(t) for t in store.load_study("handbuilt").get_trials()]
    store.close()
    measured = "no trial of study 'handbuilt' was measured (`tuner trials` says why)"
    with pytest.raises(UserError, match=re.escape(measured)):
        check_stored(points, ["p99_ttft_ms"], "handbuilt")
    record = StudyRecord(spec=load_study_spec(write_study_file(tmp_path)).model_dump(mode="json"))
    with pytest.raises(UserError, match=re.escape("yet; no trial was measured (`tuner trials`")):
        best_report(points, "handbuilt", record)
    with pytest.raises(UserError, match=re.escape(measured)):
        select_trial(points, "handbuilt")


def test_another_slo_is_refused_for_a_capacity_study(tmp_path: Path) -> None:
    """Issue 50 item 2: the capacity stored under the study's SLO was re-judged at its old
    rate only and printed "within the SLOs" though never measured under the new one."""
    attrs = {n: {"capacity_rps": 1.0 + n} for n in (0, 1, 2, 3, 6)}
    _, url = build_study(tmp_path, mode="capacity", attrs=attrs)
    store = Store(url)
    points = [trial_point(t) for t in store.load_study("handbuilt").get_trials()]
    store.close()
    with pytest.raises(UserError, match="a capacity study's SLO chose the rates"):
        select_trial(points, "handbuilt", limits=parse_slo("p99_ttft_ms<=1000"))
    assert select_trial(points, "handbuilt").point.capacity_rps is not None  # its own SLO
    # `export --simulated` of a planned study was sent to `tuner run`, a real night (the walk
    # of issue 49/50); its own command is `tuner plan`
    with pytest.raises(
        UserError, match=re.escape("run `tuner plan --accept-changes` (as `tuner plan`")
    ):
        select_trial(points, "handbuilt-simulated", limits=parse_slo("p99_ttft_ms<=1000"))
