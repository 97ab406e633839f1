#!/usr/bin/python3
"""Checks the ABI surface of a built libnctmc shared library (lib/nctmc.map):

- its soname is libnctmc.so.1;
- it defines only nctmc_* symbols, each bound to its symbol version
  (objdump -T): NCTMC_1 for 0.2.0's functions, NCTMC_1.1 for those 0.3.0
  added, NCTMC_1.2 for those 0.4.0 added, NCTMC_1.3 for those added after
  0.7.0; and the public functions of
  nctmc.h are among them.

Usage: check_symbols.py LIBNCTMC_SO [NCTMC_H]. Exits 0 when everything
holds; scripts/check_install.py runs the same checks on an installed copy.
"""
import re
import subprocess
import sys

SONAME = "libnctmc.so.1"
VERSION_NODE = "NCTMC_1"
# functions added after 0.2.0, by the version node that introduced them
ADDED = {
    "nctmc_preset_apply": "NCTMC_1.1",
    "nctmc_preset_backend": "NCTMC_1.1",
    "nctmc_preset_description": "NCTMC_1.1",
    "nctmc_preset_name": "NCTMC_1.1",
    "nctmc_dataset_writer_append": "NCTMC_1.2",
    "nctmc_dataset_writer_commit": "NCTMC_1.2",
    "nctmc_dataset_writer_create": "NCTMC_1.2",
    "nctmc_dataset_writer_free": "NCTMC_1.2",
    "nctmc_dataset_writer_last_error": "NCTMC_1.2",
    "nctmc_infill": "NCTMC_1.2",
    "nctmc_infill_params_init_sized": "NCTMC_1.2",
    "nctmc_load_params_init_sized": "NCTMC_1.2",
    "nctmc_model_convert": "NCTMC_1.2",
    "nctmc_model_is_mapped": "NCTMC_1.2",
    "nctmc_model_load_ex": "NCTMC_1.2",
    "nctmc_model_weight_type": "NCTMC_1.2",
    "nctmc_tokenizer_load_gpt2": "NCTMC_1.2",
    "nctmc_tokenizer_load_hf_json": "NCTMC_1.2",
    "nctmc_tokenizer_pad_vocab": "NCTMC_1.2",
    "nctmc_features_init_sized": "NCTMC_1.3",
    "nctmc_get_features": "NCTMC_1.3",
    "nctmc_sampler_memory": "NCTMC_1.3",
    "nctmc_set_log_callback": "NCTMC_1.3",
    "nctmc_trainer_memory": "NCTMC_1.3",
    # after 0.7.0: data-parallel training (docs/distributed.md)
    "nctmc_comm_abort": "NCTMC_1.3",
    "nctmc_comm_barrier": "NCTMC_1.3",
    "nctmc_comm_broadcast": "NCTMC_1.3",
    "nctmc_comm_engine": "NCTMC_1.3",
    "nctmc_comm_free": "NCTMC_1.3",
    "nctmc_comm_from_env": "NCTMC_1.3",
    "nctmc_comm_from_mpi": "NCTMC_1.3",
    "nctmc_comm_last_error": "NCTMC_1.3",
    "nctmc_comm_rank": "NCTMC_1.3",
    "nctmc_comm_size": "NCTMC_1.3",
    "nctmc_sample_params_from_model": "NCTMC_1.3",
}
NODES = {VERSION_NODE} | set(ADDED.values())


def soname_of(path):
    out = subprocess.run(["objdump", "-p", path], capture_output=True, text=True).stdout
    m = re.search(r"^\s*SONAME\s+(\S+)", out, re.M)
    return m.group(1) if m else None


def defined_symbols(path):
    """(name, version) of every symbol the library defines, versions included."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True).stdout
    symbols = []
    for line in out.splitlines():
        fields = line.split()
        # address flags... section size version name; undefined ones say *UND*
        if len(fields) < 4 or "*UND*" in line or not re.match(r"^[0-9a-f]{8,}$", fields[0]):
            continue
        name, version = fields[-1], fields[-2]
        if name in NODES:  # a version definition itself (*ABS*)
            continue
        symbols.append((name, version))
    return symbols


def declared_functions(header):
    with open(header) as f:
        text = f.read()
    return set(re.findall(r"NCTMC_API\s[^;(]*?\b(nctmc_\w+)\s*\(", text))


def problems(path, header=None):
    found = []
    soname = soname_of(path)
    if soname != SONAME:
        found.append("soname is %s, expected %s" % (soname, SONAME))
    symbols = defined_symbols(path)
    foreign = [n for n, _ in symbols if not n.startswith("nctmc_")]
    if foreign:
        found.append("non-nctmc symbols exported: " + ", ".join(foreign[:8]))
    unversioned = ["%s (%s, expected %s)" % (n, v, ADDED.get(n, VERSION_NODE))
                   for n, v in symbols if v != ADDED.get(n, VERSION_NODE)]
    if unversioned:
        found.append("symbols in the wrong version node: " + ", ".join(unversioned[:8]))
    if len(symbols) < 10:
        found.append("only %d symbols exported" % len(symbols))
    if header:
        missing = declared_functions(header) - {n for n, _ in symbols}
        if missing:
            found.append("declared in nctmc.h but not exported: " + ", ".join(sorted(missing)))
    return found


if __name__ == "__main__":
    issues = problems(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    for issue in issues:
        print("FAIL " + issue)
    if not issues:
        print("symbols: %s exports only nctmc_*, versioned %s (later additions %s)"
              % (SONAME, VERSION_NODE, ", ".join(sorted(set(ADDED.values())))))
    sys.exit(1 if issues else 0)
