import shutil, time
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
names = [
    l.split()[1] for l in open("/tmp/sweep_export.log") if l.startswith("REFUSED") and "row tracking" in l
]
out = Path("/tmp/expsweep_dv")
shutil.rmtree(out, ignore_errors=True)
out.mkdir()
for name in names:
    t = root / name
    src = t / "delta" if (t / "delta").is_dir() else t
    dst = out / name
    shutil.copytree(src, dst)
    s = time.time()
    try:
        table = DeltaTable.forPath(spark, str(dst))
        table.setProperties({"delta.enableRowTracking": "true"})
        res = table.toIceberg(formatVersion=3)
        n = table.toDF().count()
        ice = StaticTable.from_metadata(res.metadata_location)
        theirs = ice.scan().to_arrow().num_rows
        print(
            "OK " if n == theirs else "BAD",
            name,
            n,
            theirs,
            "dvs",
            res.deletion_vectors,
            round(time.time() - s, 1),
            flush=True,
        )
    except Exception as e:
        print("ERR", name, type(e).__name__, (str(e).splitlines() or [""])[0][:200], flush=True)
