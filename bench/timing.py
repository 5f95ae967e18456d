"""Device timing shared by the benchmarks: CUDA events, warm-up, median of repeats."""
import statistics

import torch


def time_ms(fn, min_total_ms: float = 300.0, max_reps: int = 50) -> float:
    """Median milliseconds of fn() after one warm-up, repeating until min_total_ms elapses."""
    fn()
    torch.cuda.synchronize()
    times = []
    while len(times) < max_reps and (len(times) < 3 or sum(times) < min_total_ms):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def attention_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal):
    """Forward FLOPs (two matmuls); causal counts half, as the anchors and flash-attention do."""
    flops = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim
    return flops / 2 if causal else flops
