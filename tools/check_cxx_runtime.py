#!/usr/bin/env python3
"""The C++ runtime an extension must share with torch, and the post-link check that it does.

A PyTorch extension runs in a process that has already loaded one libstdc++ (the one torch's
libraries were resolved against). If the extension carries a second, static copy of libstdc++'s
internals (locale, iostreams, exception handling), the two copies disagree about global state and
the process can crash on the first formatted error message. A compiler whose own library folder
holds only libstdc++.a produces exactly that with a plain `-lstdc++`; the build avoids it by
linking the shared library torch loads, found here, and checks the result after linking.

  --torch-runtime       print the path of the libstdc++ the importing torch has loaded (nothing
                        when torch runs on another C++ runtime, e.g. libc++ on macOS)
  --check SO            fail with a message naming the cause when SO
                          * defines (non-weak) symbols that the shared runtime also defines:
                            a static copy of libstdc++ linked in;
                          * uses libstdc++ but does not load it as a shared library;
                          * needs GLIBCXX/CXXABI symbol versions the runtime lacks (built by a
                            compiler newer than the runtime torch runs on).
  --runtime LIB         the runtime to check against (default: --torch-runtime's answer)

Uses nm and readelf from binutils, which every toolchain that links ELF objects ships.
"""
import argparse
import re
import subprocess
import sys

STRONG_DEFINITION = set("TtDdBbRr")  # text, data, bss, read-only; weak (W, V) and unique (u) excluded
RUNTIME_VERSION = re.compile(r"\b((?:GLIBCXX|CXXABI)_[0-9.]+)\b")


def torch_runtime():
    """Path of the libstdc++ mapped into this process once torch is imported, or None."""
    import torch  # noqa: F401  (loads libc10/libtorch and with them their C++ runtime)

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if re.search(r"/libstdc\+\+\.so(\.\d+)*$", path):
                return path
    return None


def run(*cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"check_cxx_runtime: {' '.join(cmd)} failed: {done.stderr.strip()}")
    return done.stdout


def symbols(path, dynamic):
    """{name: type letter} of the symbols `path` defines (its dynamic table or its full table)."""
    out = run("nm", "--defined-only", *(["-D"] if dynamic else []), path)
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            table[parts[2].split("@")[0]] = parts[1]
    return table


def needed_libraries(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def version_section(path, title):
    """Versions named in one readelf -V section ("Version needs" or "Version definition")."""
    text = run("readelf", "-V", path)
    found = set()
    in_section = False
    for line in text.splitlines():
        if line.startswith("Version"):
            in_section = line.startswith(title)
        elif in_section:
            found.update(RUNTIME_VERSION.findall(line))
    return found


def problems(extension, runtime):
    """Human-readable reasons the extension would not share `runtime` with torch (empty: fine)."""
    found = []
    exported = symbols(runtime, dynamic=True)
    own = symbols(extension, dynamic=False)
    copied = sorted(name for name, kind in own.items() if kind in STRONG_DEFINITION and name in exported)
    markers = sorted(name for name in own if re.match(r"_GLOBAL__sub_I_.*(locale_inst|ios_init)", name))
    if copied or markers:
        found.append(
            f"{extension} defines {len(copied)} symbol(s) of libstdc++ itself, e.g. "
            f"{', '.join((copied + markers)[:4])}: a static copy of the C++ runtime was linked in, "
            f"beside the shared {runtime} that torch loads. The compiler's library folder probably "
            "holds only libstdc++.a; link the shared runtime (CMakeLists.txt does so when it finds "
            "torch's) or build with a compiler that ships libstdc++.so.")
    uses_cxx = any(name.startswith(("_ZNSt", "_ZSt", "_ZNKSt", "__cxa_", "__gxx_")) for name in
                   re.findall(r"\s([^\s@]+)(?:@\S+)?$", run("nm", "-D", "--undefined-only", extension), re.M))
    if uses_cxx and not any(lib.startswith("libstdc++.so") for lib in needed_libraries(extension)):
        found.append(f"{extension} uses the C++ runtime but does not load libstdc++.so: it cannot share "
                     f"the one torch loads ({runtime}).")
    missing = sorted(version_section(extension, "Version needs") - version_section(runtime, "Version definition"))
    if missing:
        found.append(f"{extension} needs {', '.join(missing)}, which {runtime} (the C++ runtime torch "
                     "loads) does not provide: it was built by a newer compiler than that runtime. Use "
                     "a compiler no newer than the one torch's runtime comes from.")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-runtime", action="store_true")
    parser.add_argument("--check", metavar="SO")
    parser.add_argument("--runtime", metavar="LIB")
    args = parser.parse_args(argv)
    if args.torch_runtime:
        print(torch_runtime() or "")
        return 0
    if not args.check:
        parser.error("give --torch-runtime or --check SO")
    runtime = args.runtime or torch_runtime()
    if not runtime:
        print("check_cxx_runtime: torch runs on no libstdc++; nothing to check")
        return 0
    found = problems(args.check, runtime)
    for reason in found:
        print(f"check_cxx_runtime: ERROR: {reason}", file=sys.stderr)
    if not found:
        print(f"check_cxx_runtime: {args.check} shares torch's C++ runtime ({runtime})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
