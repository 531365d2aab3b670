"""Bundles the built extension into the package: `pip install ./python` copies build/mentat.duckdb_extension
(or the file $MENTAT_EXTENSION names) into mentat_spark/ before the package is built. Run scripts/setup.sh first."""
import os
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
NAME = "mentat.duckdb_extension"


class BuildWithExtension(build_py):
    def run(self):
        src = pathlib.Path(os.environ.get("MENTAT_EXTENSION", HERE.parent / "build" / NAME))
        if not src.exists():
            raise SystemExit(f"{src} is missing: build the extension first (bash scripts/setup.sh)")
        shutil.copyfile(src, HERE / "mentat_spark" / NAME)
        super().run()


setup(cmdclass={"build_py": BuildWithExtension})
