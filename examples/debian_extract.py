"""Turns the apt lists of this machine into three Parquet files that examples/debian_load.sql imports.

    python3 examples/debian_extract.py [OUT_DIR]     # default build/debian

Reads /var/lib/apt/lists/*_Packages* and *_Translation-en* (plain, or compressed as apt keeps them: apt-helper
cat-file decompresses any of its formats). Run `apt-get update -o Acquire::Languages=en` first when the
Translation-en files are missing. A package in several lists (bookworm, bookworm-updates, bookworm-security)
is taken from the list apt prefers by default (security, then updates, then the release), the one
`apt-cache` shows.

Writes, with DuckDB:
- packages.parquet: name, version, section, priority, installed_size (KiB), maintainer, source, tags (list),
  description (the short one), long_description (Translation-en's, joined by Description-md5);
- deps.parquet: one row per alternative of a Depends / Pre-Depends / Recommends / Suggests group: package, kind,
  grp (the group's index in the field), alt (the alternative's index in the group), target (name, architecture
  qualifier such as `:any` dropped), op and version (the constraint, or NULL);
- provides.parquet: package, provided (virtual package name).
"""
import glob
import os
import re
import subprocess
import sys

import duckdb
import pyarrow as pa

LISTS = "/var/lib/apt/lists"
DEP_FIELDS = {"Depends": "depends", "Pre-Depends": "pre-depends", "Recommends": "recommends", "Suggests": "suggests"}
DEP = re.compile(r"^\s*([^\s(:]+(?::any)?)(?::\S+)?\s*(?:\(\s*([<>=]+)\s*([^)\s]+)\s*\))?\s*$")


def read(path):
    return subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True, capture_output=True).stdout.decode()


def stanzas(text):
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t" and key:
                fields[key] += "\n" + line[1:]
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def rank(path):
    name = os.path.basename(path)
    return 0 if "-security_" in name else 1 if "-updates_" in name else 2


def main(out):
    packages = sorted(glob.glob(f"{LISTS}/*_Packages*"), key=rank)
    translations = glob.glob(f"{LISTS}/*_Translation-en*")
    if not packages:
        sys.exit(f"no Packages lists in {LISTS}: run apt-get update")
    if not translations:
        sys.exit(f"no Translation-en lists in {LISTS}: run apt-get update -o Acquire::Languages=en")
    long = {}
    for path in translations:
        for f in stanzas(read(path)):
            text = f.get("Description-en", "")
            long.setdefault(f.get("Description-md5"), text.replace("\n.\n", "\n\n").replace("\n.", "\n"))
    pkgs, deps, provides, seen = [], [], [], set()
    for path in packages:
        for f in stanzas(read(path)):
            name = f["Package"]
            if name in seen:
                continue
            seen.add(name)
            tags = [t.strip() for t in f.get("Tag", "").replace("\n", " ").split(",") if t.strip()]
            source = f.get("Source", name).split(" ")[0]
            size = f.get("Installed-Size")
            pkgs.append((name, f.get("Version"), f.get("Section"), f.get("Priority"), int(size) if size else None,
                         f.get("Maintainer"), source, tags, f.get("Description"), long.get(f.get("Description-md5"))))
            for field, kind in DEP_FIELDS.items():
                for g, group in enumerate(f.get(field, "").split(",")):
                    for a, alt in enumerate(group.split("|")):
                        m = DEP.match(alt)
                        if m and alt.strip():
                            deps.append((name, kind, g, a, m.group(1), m.group(2), m.group(3)))
            if f.get("Multi-Arch") == "allowed":
                # apt's model of multiarch: a Multi-Arch: allowed package P provides the name P:any, which
                # dependencies such as `perl:any` name
                provides.append((name, name + ":any"))
            for p in f.get("Provides", "").split(","):
                m = DEP.match(p)
                if m and p.strip():
                    provides.append((name, m.group(1)))
    os.makedirs(out, exist_ok=True)
    con = duckdb.connect()
    cols = list(zip(*pkgs))
    names = ["name", "version", "section", "priority", "installed_size", "maintainer", "source", "tags",
             "description", "long_description"]
    con.register("pt", pa.table({n: list(c) for n, c in zip(names, cols)}))
    con.execute(f"COPY (SELECT * FROM pt ORDER BY name) TO '{out}/packages.parquet' (FORMAT parquet)")
    dcols = list(zip(*deps))
    con.register("dt", pa.table({n: list(c) for n, c in zip(["package", "kind", "grp", "alt", "target", "op",
                                                               "version"], dcols)}))
    con.execute(f"COPY dt TO '{out}/deps.parquet' (FORMAT parquet)")
    pcols = list(zip(*provides))
    con.register("vt", pa.table({"package": list(pcols[0]), "provided": list(pcols[1])}))
    con.execute(f"COPY vt TO '{out}/provides.parquet' (FORMAT parquet)")
    print(f"{len(pkgs)} packages, {len(deps)} dependency alternatives, {len(provides)} provides -> {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/debian")
