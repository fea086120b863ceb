# mypy: ignore-errors
"""Microbenchmarks of this machine's accelerator, run with PyTorch in vLLM's own environment
(`tuner sim profile --measure`; docs/simulator.md, "Measured profiles").

A standalone script: it imports torch and the standard library only, never the tuner (whose
environment has no torch). Given the model's shapes as JSON on the command line, it prints
one JSON object: the device, its memory, and the time of

- the model's linear layers (QKV, attention output, gate/up, down) as GEMMs at several
  token counts, and as the one-token GEMV a decode step reads its weights with;
- attention (`scaled_dot_product_attention`) at several context lengths;
- a large copy (memory bandwidth);
- an all-reduce across the GPUs given (NCCL), when there are several (skipped on the CPU or
  one device).

Each figure is the median of a few timed repeats after a warm-up; the whole run takes under
a minute on one CPU core.

    python microbench_torch.py '{"hidden_size": 128, ...}' [--threads N] [--quick]
"""

import json
import os
import statistics
import sys
import time

if __name__ == "__main__":  # run as a script only: imported (the tuner's env), it has no torch
    import torch
    import torch.nn.functional as F


def _timed(fn, device, repeats=5, min_s=0.02):
    """Median seconds of one call of `fn`, each sample looping until `min_s` has passed."""
    fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            _sync(device)
            elapsed = time.perf_counter() - start
            if elapsed >= min_s:
                break
        samples.append(elapsed / n)
    return statistics.median(samples)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _linears(shape):
    """(in, out) of one layer's linear maps: QKV, attention output, gate and up, down."""
    h, hd = shape["hidden_size"], shape["head_dim"]
    q, kv = shape["num_heads"] * hd, shape["num_kv_heads"] * hd
    inter = shape["intermediate_size"]
    return [(h, q + 2 * kv), (q, h), (h, 2 * inter), (inter, h)]


def gemms(shape, device, dtype, token_counts):
    """Per token count: seconds for one layer's linear maps, their FLOPs and weight bytes;
    and the LM head (hidden x vocab) for one sampled row, as each step computes it."""
    size = torch.finfo(dtype).bits // 8
    maps = _linears(shape)
    weights = [torch.randn(i, o, device=device, dtype=dtype) for i, o in maps]
    out = []
    for tokens in token_counts:
        xs = [torch.randn(tokens, i, device=device, dtype=dtype) for i, _ in maps]

        def layer(xs=xs):
            for x, w in zip(xs, weights, strict=True):
                torch.matmul(x, w)

        seconds = _timed(layer, device)
        flops = sum(2 * tokens * i * o for i, o in maps)
        weight_bytes = sum(i * o * size for i, o in maps)
        out.append(
            {"tokens": tokens, "seconds": seconds, "flops": flops, "weight_bytes": weight_bytes}
        )
    h, vocab = shape["hidden_size"], shape["vocab_size"]
    head = torch.randn(h, vocab, device=device, dtype=dtype)
    row = torch.randn(1, h, device=device, dtype=dtype)
    seconds = _timed(lambda: torch.matmul(row, head), device)
    lm_head = {"seconds": seconds, "flops": 2 * h * vocab, "weight_bytes": h * vocab * size}
    return out, lm_head


def attention(shape, device, dtype, contexts, query_tokens):
    """Per (context, query tokens): seconds of one layer's attention, and its FLOPs."""
    heads, hd = shape["num_heads"], shape["head_dim"]
    out = []
    for context in contexts:
        for q in query_tokens:
            q = min(q, context)
            query = torch.randn(1, heads, q, hd, device=device, dtype=dtype)
            keys = torch.randn(1, heads, context, hd, device=device, dtype=dtype)
            values = torch.randn(1, heads, context, hd, device=device, dtype=dtype)

            def attend(query=query, keys=keys, values=values):
                F.scaled_dot_product_attention(query, keys, values)

            seconds = _timed(attend, device)
            flops = 4 * heads * hd * q * context  # QK^T and PV
            out.append({"context": context, "query": q, "seconds": seconds, "flops": flops})
    return out


def bandwidth(device, megabytes):
    """Bytes per second of a large copy (each byte read once and written once)."""
    src = torch.empty(megabytes * 2**20, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), device)
    return {"bytes": 2 * src.numel(), "seconds": seconds, "bytes_s": 2 * src.numel() / seconds}


def _allreduce_worker(rank, world, port, sizes, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    found = []
    for size in sizes:
        t = torch.ones(size // 2, dtype=torch.bfloat16, device=device)
        seconds = _timed(lambda t=t: torch.distributed.all_reduce(t), device)
        found.append({"bytes": size, "seconds": seconds})
    if rank == 0:
        results.put(found)
    torch.distributed.destroy_process_group()


def allreduce(devices):
    """All-reduce seconds at a small and a large message across `devices` GPUs (NCCL)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    sizes = [4096, 64 * 2**20]
    mp.start_processes(
        _allreduce_worker,
        args=(devices, port, sizes, results),
        nprocs=devices,
        start_method="spawn",
    )
    return {"devices": devices, "runs": results.get(timeout=60)}


def main(argv):
    shape = json.loads(argv[1])
    quick = "--quick" in argv
    threads = int(argv[argv.index("--threads") + 1]) if "--threads" in argv else None
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if threads and not cuda:
        torch.set_num_threads(threads)
    dtype = torch.bfloat16
    out = {"torch": torch.__version__, "platform": "cuda" if cuda else "cpu"}
    if cuda:
        props = torch.cuda.get_device_properties(device)
        out.update(
            device_name=props.name, memory_bytes=props.total_memory,
            device_count=torch.cuda.device_count(),
        )  # fmt: skip
    else:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        out.update(device_name="cpu", memory_bytes=pages, device_count=1)
        out["threads"] = torch.get_num_threads()
    big = 256 if quick or not cuda else 2048
    counts = [1, 16, big] if quick else [1, 16, 128, big]
    out["gemm"], out["lm_head"] = gemms(shape, device, dtype, counts)
    contexts = [256, 1024] if quick else [256, 1024, 4096]
    out["attention"] = attention(shape, device, dtype, contexts, [1, 256])
    out["bandwidth"] = bandwidth(device, 64 if not cuda else 1024)
    if cuda and out["device_count"] > 1 and not quick:
        try:
            out["allreduce"] = allreduce(out["device_count"])
        except Exception as exc:  # NCCL missing or refused: the profile keeps its own figures
            out["allreduce_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv)
