"""Registers and spill bytes per kernel from nvcc's `-Xptxas -v` output (the build log
tools/device/device_run.sh keeps), one demangled kernel a line.

Usage: python tools/sass/ptxas_summary.py LOG [--title LINE ...] > FILE
"""
import argparse
import re
import shutil
import subprocess
import sys


def kernels(text):
    """{mangled name: (spill store bytes, registers)} in the order ptxas reports them."""
    found, current = {}, None
    for line in text.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            current = m.group(1)
            found.setdefault(current, [None, None])
        elif current and (m := re.search(r"(\d+) bytes spill stores", line)):
            found[current][0] = int(m.group(1))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            found[current][1] = int(m.group(1))
            current = None
    return found


def demangle(names):
    if not shutil.which("c++filt"):
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.splitlines()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="nvcc output with -Xptxas -v ('-': stdin)")
    ap.add_argument("--title", action="append", default=[], help="a header line (repeatable)")
    args = ap.parse_args()
    text = sys.stdin.read() if args.log == "-" else open(args.log, errors="replace").read()
    found = kernels(text)
    for line in args.title:
        print(f"# {line}")
    print("# spill_store_bytes registers kernel")
    for name, pretty in sorted(zip(found, demangle(list(found))), key=lambda x: x[1]):
        if "block_offsets_kernel" in pretty:
            continue
        spill, regs = found[name]
        pretty = pretty.replace("chiplet_fa::", "").replace("(DType)0", "fp16").replace("(DType)1", "bf16")
        print(f"{'?' if spill is None else spill:>5} {'?' if regs is None else regs:>4} {pretty}")


if __name__ == "__main__":
    main()
