"""Makespan of a persistent forward whose workers claim tiles in a given order (the dynamic queue
of kernels/sm90/tile_scheduler.h), over the ideal (total work / workers): head-first with each row
reversed (the tree), block-first ascending, and sections of S rows walked block-major with the
m-blocks descending. Tile cost = 1 + its key blocks (a model: no measured step costs).

  python bench/causal_tail_sim.py
"""
import heapq, math
def sim(order, W):
    h=[(0.0,w) for w in range(W)]; heapq.heapify(h); end=0
    for c in order:
        t,w=heapq.heappop(h); t+=c; end=max(end,t); heapq.heappush(h,(t,w))
    return end
def run(B,H,N,BM,BN,W,S_list,c0=1.0,causal=True):
    M=math.ceil(N/BM)
    def cost(m):
        r1=min(N,(m+1)*BM)
        return c0+(math.ceil(r1/BN) if causal else math.ceil(N/BN))
    rows=B*H
    ideal=sum(cost(m) for m in range(M))*rows/W
    hf=[cost(m) for r in range(rows) for m in reversed(range(M))]
    bf=[cost(m) for m in range(M) for r in range(rows)]
    out={'ideal':ideal,'hf_rev':sim(hf,W)/ideal,'bf_asc':sim(bf,W)/ideal}
    for S in S_list:
        o=[]
        for s0 in range(0,rows,S):
            n=min(S,rows-s0)
            o+=[cost(m) for m in reversed(range(M)) for r in range(n)]
        out[f'sec{S}']=sim(o,W)/ideal
    return {k:round(v,3) for k,v in out.items()}
print('B8H16N2K D64', run(8,16,2048,192,128,132,[4,8,12,16,24,32]))
print('B4H16N1000', run(4,16,1000,192,128,132,[4,8,12,16,24,64]))
print('H32N8K D64', run(1,32,8192,192,128,132,[2,4,8,16]))
print('H32N8K D128', run(1,32,8192,128,128,132,[2,4,8,16]))
print('H128N8K D128', run(1,128,8192,128,128,132,[2,4,8,16]))
print('B4H32N4K D128', run(4,32,4096,128,128,132,[2,4,8,16]))
print('H32N8K D128 noncausal', run(1,32,8192,128,128,132,[2],causal=False))
