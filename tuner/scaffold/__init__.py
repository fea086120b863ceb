"""`tuner init`: a ready study file from what is on the box (docs/study-file.md, "tuner init").

- `box`: the GPUs this machine has (nvidia-smi, else NVML; neither: none), as built-in names;
- `traffic`: the workload and default SLOs of each traffic kind (chat, longdoc, a JSONL file);
- `cost`: what one trial costs, from the simulator's baseline trial;
- `study`: the study file itself, checked as `tuner plan` would check it, then written.

Nothing is written until the study has passed every check; a mistake is one `UserError` line.
"""
