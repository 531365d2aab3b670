#!/usr/bin/env python3
"""Append DuckDB's extension metadata footer to a shared library.

DuckDB reads the last 512 bytes of an extension file: 8 metadata fields of 32 bytes each (stored last field
first), then a 256-byte signature (zeros: the extension is unsigned and loads with allow_unsigned_extensions).
A 22-byte WebAssembly custom-section header named `duckdb_signature` precedes them. For C API extensions the
fields are: magic "4", platform, C API version, extension version, ABI type "C_STRUCT".

usage: append_metadata.py LIB OUT --platform linux_amd64 --capi-version v1.2.0 --extension-version 0.1.0
"""
import argparse
import os
import shutil


def field(text: str) -> bytes:
    raw = text.encode("ascii")
    if len(raw) > 32:
        raise SystemExit(f"metadata field {text!r} is longer than 32 bytes")
    return raw.ljust(32, b"\0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("out")
    ap.add_argument("--platform", required=True)
    ap.add_argument("--capi-version", default="v1.2.0")
    ap.add_argument("--extension-version", default="0.1.0")
    args = ap.parse_args()
    # Written beside the target and renamed over it, so that a process that has the old file loaded keeps
    # reading a whole file.
    tmp = args.out + ".tmp"
    shutil.copyfile(args.lib, tmp)
    # field 1 .. field 8, written in reverse order
    fields = ["4", args.platform, args.capi_version, args.extension_version, "C_STRUCT", "", "", ""]
    header = b"\x00" + b"\x93\x04" + b"\x10" + b"duckdb_signature" + b"\x80\x04"
    body = b"".join(field(f) for f in reversed(fields))
    with open(tmp, "ab") as f:
        f.write(header + body + b"\0" * 256)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
