"""Constants several modules share, at the bottom of the import graph: the version, the
Hugging Face kernels API level, the environment variables and the file names more than
one module names. Imports nothing.
"""

__version__ = "0.2.0"

# The Hugging Face kernels version whose behaviour this client follows. A kernel's
# ``metadata.json`` may ask for a minimum one (``kernels-minver``): it loads when that
# is at most this.
HF_KERNELS_API = "0.17.2"

# The settings (:mod:`flashhub_kernels._config`) read these; the modules that parse them
# or advise about them name them in their messages.
TRUSTED_KEYS_VAR = "FLASHHUB_TRUSTED_KEYS"
REQUIRE_SIGNATURES_VAR = "FLASHHUB_REQUIRE_SIGNATURES"
LOCAL_KERNELS_VAR = "LOCAL_KERNELS"

# A variant's manifest, its signatures (a document's lie beside it, with this suffix),
# and the receipt the cache writes beside an entry's files once it is verified.
MANIFEST_NAME = "metadata.json"
SIG_SUFFIX = ".sig"
MANIFEST_SIGNATURE_NAME = MANIFEST_NAME + SIG_SUFFIX
RECEIPT_NAME = ".flashhub-receipt.json"
