#!/usr/bin/env python3
"""A kernel change's SASS against a git revision, compiled here (nvcc; no GPU needed).

Compiles instantiation units (csrc/kernels/instantiations/<family>/<unit>.cu) of two trees with
the build's CUDA flags for sm_90a (or sm_80 for mma_sync) and, for each kernel, prints its
instruction count, whether the SASS is the same instruction for instruction (addresses and
encodings aside), ptxas's spill bytes and C75xx messages (wgmmas serialised or fenced), and the
opcodes whose counts moved. A change whose kernels
come out the same needs no device time to show it changes nothing; one that differs needs its A/B.

  python3 tools/sass/sass_diff.py --patch x.patch --units 'sm90/bwd_bf16_*'
  python3 tools/sass/sass_diff.py --base HEAD~1 --units sm90/fwd_bf16_hdim128_full   # vs the work tree

cuobjdump: from $CUOBJDUMP or PATH (this project's CPU machines lack it; docs/building.md,
"Checks that need no GPU", says which pip packages carry it).
"""
import argparse
import collections
import concurrent.futures
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INST = Path("csrc/kernels/instantiations")
NVCC_FLAGS = ["-std=c++20", "-O3", "--use_fast_math", "--expt-relaxed-constexpr", "-Xptxas=-v"]
ARCH = {"sm90": "arch=compute_90a,code=sm_90a", "mma_sync": "arch=compute_80,code=sm_80"}


def parse_ptxas(text):
    """{entry: (registers, spill store bytes, spill load bytes, C75xx messages)} from `ptxas -v`
    output. The C75xx messages (e.g. C7511, C7519) say ptxas serialised or fenced wgmmas."""
    out, entry, spills = {}, None, (0, 0)
    messages = collections.Counter(re.findall(r"\(C75\d\d\).*?function '(\w+)'", text))
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(\w+)'?", line)
        if m:
            entry = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spills = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and entry:
            out[entry] = (int(m.group(1)),) + spills + (messages[entry],)
    return out


def parse_sass(text):
    """{function: [instruction without address, encoding or immediates]} from `cuobjdump -sass`."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", line)
        if cur is not None and m:
            cur.append(re.sub(r"0x[0-9a-f]+", "#", m.group(1)).strip())
    return out


def opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]


def compile_unit(tree, unit, workdir, cuobjdump):
    family = unit.split("/")[0]
    cubin = workdir / (unit.replace("/", "_") + ".cubin")
    cmd = ["nvcc", *NVCC_FLAGS, f"-gencode={ARCH[family]}", "-Icsrc", f"-I{workdir}", "-cubin", "-o", str(cubin),
           str(INST / f"{unit}.cu")]
    r = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{unit} in {tree}: nvcc failed:\n{r.stderr[-3000:]}")
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return parse_ptxas(r.stderr), parse_sass(sass)


def build_config(workdir, tree):
    """The build's generated header, with every CMake value a placeholder (kernels do not read them)."""
    text = (Path(tree) / "csrc/ops/build_config.h.in").read_text()
    (workdir / "build_config.h").write_text(re.sub(r"@\w+@", "0", text))


def units_of(tree, patterns):
    found = sorted(str(p.relative_to(Path(tree) / INST))[:-3] for p in (Path(tree) / INST).glob("*/*.cu"))
    return [u for u in found if any(fnmatch.fnmatch(u, p) for p in patterns)]


def rows(unit, base, new):
    (pa, sa), (pb, sb) = base, new
    for fn in sa:
        if fn not in sb:
            yield (unit, fn, len(sa[fn]), None, "gone", pa.get(fn), None, "")
            continue
        a, b = sa[fn], sb[fn]
        ca, cb = collections.Counter(map(opcode, a)), collections.Counter(map(opcode, b))
        moved = sorted(((cb[o] - ca[o], o) for o in set(ca) | set(cb) if cb[o] != ca[o]), key=lambda d: -abs(d[0]))
        yield (unit, fn, len(a), len(b), "same" if a == b else "differs", pa.get(fn), pb.get(fn),
               " ".join(f"{o} {d:+d}" for d, o in moved[:6]))
    for fn in sb.keys() - sa.keys():
        yield (unit, fn, None, len(sb[fn]), "new", None, pb.get(fn), "")


def short(fn):
    """A kernel's name and template arguments from its mangled name (kernel<1, 128, 0, 1, 0>): in
    the order the kernel's template declares them, enough to tell the variants apart."""
    pos, name = fn.find("_ZN") + 3, fn
    while 2 < pos < len(fn) and fn[pos].isdigit():  # the nested name: <length><identifier> ...
        n = re.match(r"\d+", fn[pos:]).group(0)
        name, pos = fn[pos + len(n):pos + len(n) + int(n)], pos + len(n) + int(n)
    if not fn.startswith("I", pos):
        return name
    args = re.findall(r"L(?:NS\d*_\d+[A-Za-z]+E|[a-z])(\d+)E|\d+(__[A-Za-z]\w*?)(?=E)", fn[pos + 1:])
    return f"{name}<{', '.join(a or t for a, t in args)}>"


def table(all_rows):
    lines = ["| unit | kernel | instructions | SASS | registers, spill st/ld, C75xx | opcodes moved |",
             "|---|---|---|---|---|---|"]
    spill = lambda s: "-" if s is None else f"{s[0]}, {s[1]}/{s[2]}, {s[3]}"
    for unit, fn, na, nb, verdict, pa, pb, moved in all_rows:
        count = f"{na} -> {nb}" if na != nb else f"{na}"
        regs = spill(pa) if pa == pb else f"{spill(pa)} -> {spill(pb)}"
        lines.append(f"| {unit} | `{short(fn)}` | {count} | {verdict} | {regs} | {moved} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    ap.add_argument("--patch", help="compare base with base + this patch (default: base with the work tree)")
    ap.add_argument("--units", nargs="+", default=["sm90/bwd_bf16_*"], help="unit globs under instantiations/")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", help="also write the table here (markdown)")
    args = ap.parse_args(argv)
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump or not shutil.which("nvcc"):
        sys.exit("sass_diff: needs nvcc and cuobjdump (set CUOBJDUMP; see docs/building.md, Checks that need no GPU)")
    with tempfile.TemporaryDirectory(prefix="sass_diff_") as tmp:
        tmp = Path(tmp)
        base_tree = tmp / "base"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base_tree), args.base], cwd=ROOT, check=True)
        try:
            new_tree = ROOT
            if args.patch:
                new_tree = tmp / "new"
                subprocess.run(["git", "worktree", "add", "-q", "--detach", str(new_tree), args.base], cwd=ROOT, check=True)
                subprocess.run(["git", "apply", str(Path(args.patch).resolve())], cwd=new_tree, check=True)
            units = units_of(new_tree, args.units)
            if not units:
                sys.exit(f"sass_diff: no unit matches {args.units}")
            dirs = {t: tmp / f"work_{i}" for i, t in enumerate((base_tree, new_tree))}
            for t, d in dirs.items():
                d.mkdir()
                build_config(d, t)
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                jobs = {(u, t): pool.submit(compile_unit, t, u, dirs[t], cuobjdump) for u in units for t in dirs}
                all_rows = [r for u in units for r in rows(u, jobs[u, base_tree].result(), jobs[u, new_tree].result())]
        finally:
            for t in (tmp / "new", base_tree):
                if t.exists():
                    subprocess.run(["git", "worktree", "remove", "--force", str(t)], cwd=ROOT, check=False)
    text = table(all_rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
