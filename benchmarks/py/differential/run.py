"""The differential run as a script: python benchmarks/py/differential/run.py --pairs N --seed S."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))
from benchmarks.py.differential.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
