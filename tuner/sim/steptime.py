"""How long one engine step takes: a roofline plus all-reduce plus per-step overhead.

    t = max(GEMM FLOPs / (peak * flops_efficiency)
            + attention FLOPs / (peak * attention_efficiency),
            bytes / (bandwidth * bandwidth_efficiency))
        + all-reduce(tokens) + step_overhead + per_seq * seqs + per_token * tokens

GEMM FLOPs are the linear layers (2 * params * tokens) and the LM head for sampled rows;
attention FLOPs 4 * layers * heads/TP * head_dim per query-key pair. The two reach different
shares of the peak (attention's share of a step grows with context: a third at 32k on a
32B model), so each has its own efficiency. Bytes are the weights
read once per step plus the KV cache read by attention. The all-reduce is two per layer,
ring algorithm, over the interconnect. The constants (`StepTimeConstants`) belong to the
accelerator profile, in profiles.py; they are documented in docs/simulator.md.

Issue 45's two size effects: GEMMs reach less of the peak on small matrices
(`gemm_efficiency`: a step of few tokens, a model of small hidden size), and a step's kernels
take a least time per layer however little work they do (`layer_floor`), which a small
model's decode step hits before its weight read.
"""

from __future__ import annotations

import numpy as np

from tuner.sim.profiles import GpuProfile, ModelProfile


def gemm_efficiency(
    peak_efficiency: float, tokens: float, hidden: float, half_tokens: float, half_hidden: float
) -> float:
    """The share of the dense peak a step's GEMMs reach: `peak_efficiency` on large matrices,
    saturating in both of a GEMM's sizes that vary (the tokens in the step, M; the model's
    hidden size, K and N's scale): peak * M / (M + half_tokens) * d / (d + half_hidden).
    A half at 0 drops its term (the model before issue 45: one efficiency per GPU)."""
    eff = peak_efficiency
    if half_tokens > 0:
        eff *= tokens / (tokens + half_tokens)
    if half_hidden > 0:
        eff *= hidden / (hidden + half_hidden)
    return eff


def layer_floor(num_layers: int, layer_floor_s: float) -> float:
    """The least time a step's forward pass takes: every layer's kernels (norms, GEMMs,
    attention, activation, all-reduce) are launched and wait on one another even when their
    work is a few microseconds, so a small model's decode step is not its weight read alone."""
    return num_layers * layer_floor_s


class StepCostModel:
    """Step times of one model on one accelerator at one tensor-parallel size."""

    def __init__(self, model: ModelProfile, gpu: GpuProfile, tp: int) -> None:
        c = gpu.constants
        self.constants = c
        self.tp = tp
        linear_params = model.num_layers * model.layer_params // tp
        lm_head_params = model.vocab_size * model.hidden_size // tp
        self._flops_per_token = 2.0 * linear_params
        self._flops_per_sample = 2.0 * lm_head_params
        self._flops_per_pair = 4.0 * model.num_layers * (model.num_heads / tp) * model.head_dim
        self._peak_flops = gpu.flops * c.flops_efficiency
        self._hidden = float(model.hidden_size)
        self._floor_s = layer_floor(model.num_layers, c.layer_floor_s)
        self._peak_attn_flops = gpu.flops * c.attention_efficiency
        self._bandwidth = gpu.bandwidth_bytes_s * c.bandwidth_efficiency
        self._weight_bytes = float(model.weight_bytes_per_gpu(tp))
        self._kv_bytes_per_token = float(model.kv_bytes_per_token(tp))
        if tp > 1:
            calls = 2 * model.num_layers
            ring = 2.0 * (tp - 1) / tp
            self._ar_fixed_s = calls * gpu.allreduce_latency_s
            self._ar_per_token_s = (
                calls * ring * model.hidden_size * model.dtype_bytes / gpu.interconnect_bytes_s
            )
        else:
            self._ar_fixed_s = self._ar_per_token_s = 0.0

    def step_time(
        self, num_tokens: int, num_seqs: int, num_sampled: int, attn_pairs: float, kv_tokens: int
    ) -> float:
        """Seconds for one step.

        `attn_pairs` is the number of query-key pairs attention computes (for a request
        with c cached tokens and q new ones: q * (c + (q + 1) / 2)); `kv_tokens` the KV
        entries attention reads (c + q per request).
        """
        c = self.constants
        gemm = self._flops_per_token * num_tokens + self._flops_per_sample * num_sampled
        compute_s = (
            gemm / self._gemm_flops(num_tokens)
            + self._flops_per_pair * attn_pairs / self._peak_attn_flops
        )
        mem = self._weight_bytes + self._kv_bytes_per_token * kv_tokens
        return (
            max(compute_s, mem / self._bandwidth, self._floor_s)
            + self._ar_fixed_s
            + self._ar_per_token_s * num_tokens
            + c.step_overhead_s
            + c.per_seq_overhead_s * num_seqs
            + c.per_token_overhead_s * num_tokens
        )

    def decode_run_times(self, num_steps: int, batch: int, context_sum: int) -> np.ndarray:
        """Durations of `num_steps` pure-decode steps of `batch` requests, in closed form.

        Step k (from 0) has every request at its context plus k, so attention work grows
        linearly; `context_sum` is the sum of the requests' cached tokens before step 0.
        """
        c = self.constants
        k = np.arange(num_steps, dtype=np.float64)
        kv_tokens = context_sum + batch * (k + 1.0)  # each reads its cache plus the new token
        dense = (self._flops_per_token + self._flops_per_sample) * batch
        dense_s = dense / self._gemm_flops(batch)
        compute_s = dense_s + self._flops_per_pair * kv_tokens / self._peak_attn_flops
        mem = self._weight_bytes + self._kv_bytes_per_token * kv_tokens
        fixed = (
            self._ar_fixed_s
            + self._ar_per_token_s * batch
            + c.step_overhead_s
            + (c.per_seq_overhead_s + c.per_token_overhead_s) * batch
        )
        return np.maximum(np.maximum(compute_s, mem / self._bandwidth), self._floor_s) + fixed

    def _gemm_flops(self, num_tokens: float) -> float:
        """FLOP/s the step's GEMMs reach (`gemm_efficiency` of the peak)."""
        c = self.constants
        if not (c.gemm_half_tokens or c.gemm_half_hidden):
            return self._peak_flops
        share = gemm_efficiency(
            1.0, num_tokens, self._hidden, c.gemm_half_tokens, c.gemm_half_hidden
        )
        return self._peak_flops * share
