"""What people take out of a stored study: the best, the front, the command to ship, the report.

stored trials (`tuner.trial.point.TrialPoint`, read from `tuner.store`) → the trial table
(`views`) and the best (`best`) → Pareto fronts (`pareto`) → the trial to ship
(`selection`) → the production command (`export`) → the HTML report (`report`).

Modules:
- `pareto`: Pareto fronts over stored trials (pure);
- `front_table`: the front as `tuner pareto` prints it: a table, or JSON or CSV text;
- `change`: the chosen trial against vLLM's defaults per headline metric, in units and percent
  (`DefaultsComparison`, computed once, rendered by `best`, `export` and the report), and
  everything that got worse against them, not only the weighted metrics (`worse_lines`);
- `verdicts`: every doubt about the chosen trial (`Verdict`s, computed once, likewise);
- `capacity_words`: capacity mode's export lines and JSON (the words: `tuner.trial.words`);
- `smallest`: the command less the flags that do not carry the gain, and why (in words);
- `setting`: the hardware, workload and SLO a choice was made under, in words;
- `section`: the `Section` protocol: one block of `tuner best` and of the report;
- `sections`: `SECTIONS`, every block of `tuner best` and the report, in order;
- `selection`: the trial to ship (the best, or the one asked for, under the SLO or `--slo`),
  judged once for every output that shows it (pure);
- `export`: the chosen trial as its `vllm serve` command (shell, `--config` YAML, JSON), never
  one vLLM refuses on the study's platform;
- `shipped`: the config a study ships, judged, with its spec and baseline (`export`, `verify`);
- `commandline`: a config as production runs it: the shell command, the `--config` mapping;
- `recommend`: recommend only what the evidence carries (pure);
- `shapes`: the deployment shapes a study tried (DP replicas x TP size), side by side;
- `study_file`: the study file the commands an output suggests name;
- `table`: tables that fit a person's terminal, and comment lines that wrap;
- `views`: the trial table (rich, pandas);
- `best`: `tuner best`'s words: the best trial's story on one screen, then its command;
- `verifies`: the stored `tuner verify` history as rows and lines (`verify --history`,
  `trials`, the report);
- `report`: the self-contained HTML report and its figures (a package).

What may be assumed: read-only, never the run loop (an import-linter contract); a simulated
figure is labelled SIMULATED wherever it is shown.

Re-exported here: the front and the export. `views` (pandas) and `report` (plotly, pandas)
are heavy: import them from `tuner.results.views` and `tuner.results.report.page`.
"""

from tuner.results.commandline import shell_command
from tuner.results.pareto import front_of, pareto_front
from tuner.results.selection import select_trial

__all__ = ["front_of", "pareto_front", "select_trial", "shell_command"]
