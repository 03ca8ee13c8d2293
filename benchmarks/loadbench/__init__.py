"""Kernel loading against the limits of this machine (run it as ``python
benchmarks/bench_load.py``; docs/performance.md says what each row means).

It writes synthetic CDN trees into a temporary directory, serves them from a loopback
HTTP server (the standard library's request handler, or with ``--server lean`` one that
sends bodies with sendfile(2)), and prints one table: for each row the
median, min and max over ``--runs`` runs of flashhub-kernels and of a baseline measured
in the same run, their ratio, and the row's target with pass/FAIL. Targets are printed,
never asserted; the exit status is 0 whenever the benchmark itself ran.

Targets:
  1a  a cold load of one big file (``--size-mib``) at least as fast as a download of the
      same file verified by hand: ``curl -o FILE`` then ``sha256sum -c``, one shell
      command timed as a whole (ratio <= 1.00);
  2a  a cold load of ``--small-files`` files of 10 KiB within 2x of one ``curl -K``
      process fetching the same URLs, then ``sha256sum -c`` of them (ratio <= 2.00);
  3   a first warm import in a fresh process within 1.05x + 2 ms of the same package's
      first import from a plain directory (3a), a re-import within 1.5x (3b),
      with no HTTP request and no HTTP library imported, and not slowed (<= 1.20x) by
      ``--crowded-kernels`` (1000) other kernels in the cache (3d), nor (<= 1.20x) by a
      signed kernel with its key trusted (3f);
  4b  ``--procs`` processes cold-loading the same kernel at once make 1 GET per file;
  5   peak RSS growth of the big-file cold load under 64 MiB;
  6   ``flashhub --help`` under 150 ms, and ``import flashhub`` / ``import
      flashhub_kernels`` import neither torch nor an HTTP or file-lock library
      (requests, urllib3, filelock, http.client);
  7   a cold load of a realistic kernel variant (one ``.so`` of ``--realistic-mib`` and
      10 small Python files) within 1.2x of one ``curl -K`` process, then ``sha256sum
      -c`` (ratio <= 1.20);
  8   in fresh interpreters, ``import flashhub`` and a first warm kernel import add at
      most 0.5% of the time of ``import torch`` (ideally under 3 ms) over importing the
      same package from a plain directory;
  9   against Hugging Face kernels 0.19.1 (``--hf-venv``, ``--no-hf``), the same kernel in
      fresh interpreters: a cold load of the realistic variant (9a) and of the small files
      (9b) in at most 0.25x of HF's time, a warm ``get_kernel`` of each (9c, 9d) in at
      most 0.03x of HF's.
  10  over a slow link (a second server on the same tree: ``--link-delay-ms`` before each
      response, all bodies through one ``--link-mbit`` link), cold loads of the realistic
      variant (10a) and the small files (10b) within 1.0x of one ``curl --parallel``
      process, and faster than the 0.1.2 release (10c, 10d); the small files signed,
      the key trusted, against unsigned (10e, a reference: what signatures add); a
      version without ``variants.json``, probed, against one with it (10f, a reference);
  11  a cold load of the small files published as a zip build faster than the 0.1.2
      release's load of them as files (ratio < 1.00).

Every cold load (rows 1, 2, 5, 7) and every load of row 9, cold or warm, HF's too, is a
fresh ``python -c`` process that imports torch, then times ``get_kernel`` inside
(:mod:`loadbench.fresh`), as a user's program makes it; one more per run, with timing
spans (:mod:`loadbench.spans`), gives the breakdown of its time. The warm rows and row 4
run in processes forked from a multiprocessing "forkserver" that has already imported
torch, so a child starts with torch imported and only the call under test is timed. A
forked child also runs the entry script's imports, this package (stdlib only, and none
that a load would import if torch has not: ``median`` is written out to keep ``decimal``
out). Row 8 starts bare interpreters.

The modules, in the order a run uses them:
  cli          options, the run from start to end, the report on stdout
  trees        the synthetic kernels, published into a CDN tree
  signed       the run's signing key: the kernels it signs, the loads that trust it
  zip_tree     the small files published again as a zip build (row 11)
  servers      the loopback CDN server (the stdlib handler, or a lean one)
  link         the slow link: a delay per response, one paced link for all bodies
  fresh        cold loads in fresh interpreters, this client's or a release's, and
               the requests floor (the least a client on requests does, 1d/2e/7c)
  spans        the breakdown of a cold load, timed from outside
  children     the fork server and its fresh children
  probes       the flashhub side, run in a child: loads and imports, timed
  peer         Hugging Face kernels 0.19.1: its venv, the run's Hub, its loads
  baselines    curl (plain, or then sha256sum -c), plain ``requests``, command timing
  bench        the harness: fresh dirs and caches (put aside, their small files
               deleted at the end), cold loads, the interleaved rounds
  rows         one module per row: cold (1, 2, 5, 7), warm (3), crowd (4),
               startup (6), import_cost (8), peer (9), slow_link (10),
               zip_layout (11)
  results      Stat and Row, the measured values
  report       the table, the notes and the JSON document
  usage, machine, common   CPU time and peak RSS; the machine facts; shared constants
"""
