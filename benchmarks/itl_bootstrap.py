"""Median ITL's bootstrap interval: pooling each resample's gaps against ranking them by
the resample's draw counts (docs/metrics.md, "Uncertainty"). Same figures, both timed.

    nice .venv/bin/python benchmarks/itl_bootstrap.py [--requests 1000] [--gaps 255]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tuner.measure.metrics import _pooled_quantile_samples, _statistic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--gaps", type=int, default=255, help="ITL gaps per request")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    n = args.requests
    gaps = [rng.exponential(40.0, args.gaps) for _ in range(n)]
    idx = np.random.default_rng(0).integers(0, n, size=(args.resamples, n))
    t0 = time.perf_counter()
    pooled = [_statistic("median", None, np.concatenate([gaps[i] for i in row])) for row in idx]
    t1 = time.perf_counter()
    ranked = _pooled_quantile_samples(gaps, idx, "median", None)
    t2 = time.perf_counter()
    print(f"pooled per resample: {t1 - t0:.2f} s; ranked by counts: {t2 - t1:.2f} s")
    print(f"identical figures: {np.array_equal(np.asarray(pooled), ranked)}")


if __name__ == "__main__":
    main()
