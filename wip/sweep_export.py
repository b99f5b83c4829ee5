import shutil, sys, traceback, time
from pathlib import Path
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.session.timeZone", "UTC")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
from deltaspark import DeltaTable
from pyiceberg.table import StaticTable

root = Path("/work/shared/conformance/tables")
out = Path("/tmp/expsweep")
shutil.rmtree(out, ignore_errors=True)
out.mkdir()
for t in sorted(root.iterdir()):
    if not t.is_dir() or t.name.startswith("300k"):
        continue
    src = t / "delta" if (t / "delta").is_dir() else t
    if not (src / "_delta_log").is_dir():
        print("SKIP", t.name, "no _delta_log")
        continue
    dst = out / t.name
    shutil.copytree(src, dst)
    s = time.time()
    try:
        dt_ = DeltaTable.forPath(spark, str(dst))
        snap = dt_.snapshot()
        fv = 3 if "deletionVectors" in snap.tableFeatures else 2
        try:
            res = dt_.toIceberg(formatVersion=fv)
        except Exception as e:
            print("REFUSED", t.name, type(e).__name__, str(e).splitlines()[0][:150])
            continue
        n = dt_.toDF().count()
        theirs = StaticTable.from_metadata(res.metadata_location).scan().to_arrow().num_rows
        print("OK " if n == theirs else "BAD", t.name, fv, n, theirs, round(time.time() - s, 1), flush=True)
    except Exception as e:
        print("ERR", t.name, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "", flush=True)
