"""What ``importlib.resources`` reads of a ``"zip"`` build (see :mod:`.zip_layout`): the
archive's root, the package's. Imported when a kernel's resources are first asked for."""

from __future__ import annotations

import sys
import zipfile

if sys.version_info >= (3, 11):
    from importlib.resources.abc import TraversableResources
else:
    from importlib.abc import TraversableResources


class ArchiveResources(TraversableResources):
    """The resources of a kernel package that is the root of the zip archive ``archive``."""

    def __init__(self, archive: str) -> None:
        self._archive = archive

    def files(self) -> zipfile.Path:
        try:  # zipfile reads the central directory more strictly than zipimport
            return zipfile.Path(self._archive)
        except (zipfile.BadZipFile, NotImplementedError, OSError) as exc:
            from .archive_errors import archive_error  # only for a broken archive

            raise archive_error(self._archive, f"is malformed ({exc})") from exc
