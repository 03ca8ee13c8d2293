"""Row 11: the small-files kernel published in the zip build layout (one archive of the
package's files, :mod:`loadbench.zip_tree`), cold-loaded by flashhub in a fresh
interpreter on the loopback server, against the 0.1.2 release's cold load of the same
files in the files layout (row 2d's load; 0.1.2 loads no zip build). flashhub's load of
the files layout (row 2a's) is measured in the same rounds, for the notes."""

from __future__ import annotations

from ..bench import Bench
from ..results import Row, median
from .cold import Measurements, load_ms, vs_release

TARGET_ZIP_VS_RELEASE = 1.0


def row_zip_layout(bench: Bench) -> list[Row]:
    """Row 11: the small files as a zip build against 0.1.2's load of them as files."""
    zipped, files = bench.trees.small_zip, bench.trees.small
    measurements: Measurements = {
        "zip": lambda: bench.cold_load(zipped),
        "files": lambda: bench.cold_load(files),
    }
    if bench.args.release_dir is not None:
        measurements["release"] = lambda: bench.cold_load(files, release=True)
    count = len(files.files)
    results = bench.rounds(f"row 11: {count} small files as a zip build", measurements)

    name = f"cold load, {count} files of 10 KiB as a zip build"
    ours = load_ms(results["zip"])
    row = vs_release("11", name, ours, results.get("release"), TARGET_ZIP_VS_RELEASE)
    if row.baseline is not None:
        row.baseline_name = "0.1.2 (--release-dir), the same files as files, as in 2d"
    files_ms = load_ms(results["files"])
    archive = next(iter(zipped.files))
    row.notes.append(
        f"the package's {count} files in one stored archive ({archive}), published with "
        f"flashhub publish --layout zip; flashhub's load of the same files as files (2a's): "
        f"{files_ms.median:.1f} ms [{files_ms.min:.1f}-{files_ms.max:.1f}]; GETs per load: "
        f"zip {median([r['requests'] for r in results['zip']]):.0f}, files "
        f"{median([r['requests'] for r in results['files']]):.0f}"
    )
    return [row]
