"""Notes on a study's search space against vLLM's rules and defaults on the study's GPU
(`tuner check`, `tuner run`; docs/preflight.md, "vLLM's defaults and rules").

The baseline (trial 0) runs the space's `default:`s, read as "vLLM's defaults"; they are only
that when they are vLLM's own on this GPU (an H100 study written against the A6000's 256 /
2048 is not measuring them). A block size the GPU's platform refuses is skipped before launch,
every time the sampler proposes it: worth knowing before the night.
"""

from __future__ import annotations

from tuner.errors import UserError
from tuner.runners.plan import study_profile
from tuner.sim.vllm_defaults import VLLM_VERSION, serve_defaults
from tuner.spec.space import baseline_params, effective_flags
from tuner.spec.study import StudySpec
from tuner.spec.vllm_rules import block_size_error


def defaults_notes(spec: StudySpec) -> list[str]:
    """One note for searched defaults that are not vLLM's on the study's GPU, one for block
    sizes its platform refuses; none when the study names no GPU."""
    try:
        gpu = study_profile(spec)
    except UserError:
        return []
    params = spec.search_space.parameters
    base = baseline_params(spec.search_space) or {
        name: p.default for name, p in params.items() if p.default is not None
    }
    world = effective_flags(spec, base).get("tensor-parallel-size") or 1
    expected = serve_defaults(gpu, int(world))
    differ = [
        f"{name} {base[name]} (vLLM: {value})"
        for name, value in expected.items()
        if name in base and params[name].env is None and base[name] != value
    ]
    notes = []
    on = f"vLLM {VLLM_VERSION}'s defaults on {gpu.name}"
    if differ:
        notes.append(
            f"the baseline (trial 0) is not {on}: {', '.join(differ)}; set the search space's "
            "default: to them to measure against vLLM's defaults (tuner init does)"
        )
    block = params.get("block-size")
    sizes = [*(block.choices or []), block.default] if block is not None else []
    ints = {s for s in sizes if isinstance(s, int) and not isinstance(s, bool)}
    refused = sorted(s for s in ints if block_size_error(s, gpu.platform))
    if refused:
        example = block_size_error(refused[0], gpu.platform)
        notes.append(
            f"block-size {', '.join(map(str, refused))} of the search space: vLLM "
            f"{VLLM_VERSION} refuses it on {gpu.platform} ({example}); such trials are "
            "skipped before launch"
        )
    return notes
