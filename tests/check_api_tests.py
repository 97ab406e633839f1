#!/usr/bin/env python3
"""check_api_tests.py — the tests that claim to test the public API use it only.

    check_api_tests.py SOURCE_DIR BUILD_DIR [--not-built NAME]... NAME...

NAME is a program of tests/meson.build's api_tests list (its source is
SOURCE_DIR/NAME.c, or SOURCE_DIR/NAME.cpp for a C++ test, its executable
BUILD_DIR/NAME). For each:

  - the source, and every test helper header it includes (recursively),
    includes only <system headers>, "nctmc.h" (or "nctmc.hpp") and helpers of tests/ that
    obey the same rule; none defines or tests NCTMC_BUILDING_LIBRARY;
  - the executable needs libnctmc.so (DT_NEEDED libnctmc.so.N) and defines
    no nctmc_* symbol itself: every library function it calls comes from the
    shared library's exports, not from the internal archive linked in.

A program named after --not-built is not built in this configuration (its
source is still checked). Exits 1 with the reasons on any failure.
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
PUBLIC = {'nctmc.h', 'nctmc.hpp'}
FORBIDDEN_MACRO = 'NCTMC_BUILDING_LIBRARY'


def check_source(path, source_dir, seen, problems, via=None):
    """Checks one file's #includes, recursing into the test helpers."""
    if path in seen:
        return
    seen.add(path)
    where = os.path.relpath(path, source_dir)
    if via:
        where += f' (included by {via})'
    try:
        with open(path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except OSError as e:
        problems.append(f'{where}: cannot read: {e.strerror}')
        return
    for n, line in enumerate(lines, 1):
        if FORBIDDEN_MACRO in line:
            problems.append(f'{where}:{n}: mentions {FORBIDDEN_MACRO} (the library\'s own '
                            'build macro)')
        m = INCLUDE.match(line)
        if not m:
            continue
        kind, name = m.groups()
        if kind == '<':
            if name in PUBLIC or '/' in name and name.split('/')[0] in INTERNAL_DIRS:
                problems.append(f'{where}:{n}: #include <{name}>: a library header through '
                                'the system path')
            continue
        if name in PUBLIC:
            continue
        helper = os.path.join(source_dir, name)
        if '/' in name or not os.path.isfile(helper):
            problems.append(f'{where}:{n}: #include "{name}": not the public header nor a '
                            'helper of tests/ (an internal header?)')
            continue
        check_source(helper, source_dir, seen, problems, via=os.path.basename(path))


def internal_dirs(source_dir):
    """The library's header folders (lib/*, backends/*): base, dit, cpu, ..."""
    root = os.path.dirname(os.path.abspath(source_dir))
    names = set()
    for top in ('lib', 'backends'):
        try:
            names.update(d for d in os.listdir(os.path.join(root, top))
                         if os.path.isdir(os.path.join(root, top, d)))
        except OSError:
            pass
    return names


def check_executable(path, problems):
    """DT_NEEDED libnctmc.so.N, and no nctmc_* defined in the program."""
    name = os.path.basename(path)
    try:
        headers = subprocess.run(['objdump', '-p', path], capture_output=True, text=True,
                                 check=True).stdout
        symbols = subprocess.run(['objdump', '-t', path], capture_output=True, text=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        problems.append(f'{name}: objdump failed: {e}')
        return
    if not re.search(r'^\s*NEEDED\s+libnctmc\.so\.\d+\s*$', headers, re.M):
        problems.append(f'{name}: does not link libnctmc.so (no DT_NEEDED libnctmc.so.N): '
                        'it must use dependencies : nctmc_api_test_dep (or nctmc_dep)')
    defined = set()
    for line in symbols.splitlines():
        # "addr flags section size name": a definition is in a section other
        # than *UND*
        parts = line.split()
        if len(parts) < 5 or not parts[-1].startswith('nctmc_'):
            continue
        if '*UND*' not in parts:
            defined.add(parts[-1])
    if defined:
        some = ', '.join(sorted(defined)[:5])
        problems.append(f'{name}: defines {len(defined)} library function(s) itself ({some}'
                        f'{", ..." if len(defined) > 5 else ""}): it links the internal '
                        'archive (nctmc_internal_dep), not libnctmc.so')


def main(argv):
    if len(argv) < 3:
        print('usage: check_api_tests.py SOURCE_DIR BUILD_DIR [--not-built NAME]... NAME...',
              file=sys.stderr)
        return 2
    source_dir, build_dir = argv[1], argv[2]
    not_built, names, k = set(), [], 3
    while k < len(argv):
        if argv[k] == '--not-built' and k + 1 < len(argv):
            not_built.add(argv[k + 1])
            k += 2
        else:
            names.append(argv[k])
            k += 1
    if not names:
        print('check_api_tests: no API tests named', file=sys.stderr)
        return 2
    global INTERNAL_DIRS
    INTERNAL_DIRS = internal_dirs(source_dir)
    problems = []
    for name in names:
        source = os.path.join(source_dir, name + '.c')
        if not os.path.isfile(source):
            source = os.path.join(source_dir, name + '.cpp')
        if not os.path.isfile(source):
            problems.append(f'{name}: no source {name}.c or {name}.cpp in {source_dir}')
            continue
        check_source(source, source_dir, set(), problems)
        if name in not_built:
            continue
        exe = os.path.join(build_dir, name)
        if not os.path.isfile(exe):
            problems.append(f'{name}: not built ({exe} missing)')
            continue
        check_executable(exe, problems)
    for p in problems:
        print('check_api_tests: ' + p)
    print(f'api_tests_public: {len(names)} programs, {len(problems)} problem(s)')
    return 1 if problems else 0


INTERNAL_DIRS = set()

if __name__ == '__main__':
    sys.exit(main(sys.argv))
