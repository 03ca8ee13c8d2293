"""Import root of kernels, ``import flashhub.<org>.<pkg>.v<N>``: importing this package
installs the flashhub-kernels finder on ``sys.meta_path`` (once) and does nothing else.
Everything below ``flashhub.`` is provided by that finder."""

from flashhub_kernels._finder import install

# No directory holds a module below this package: with an empty path, Python's own
# finder answers at once that it has none, and the kernel finder is asked.
__path__ = []

install()
