"""The environment variables that more than one module names: the settings
(:mod:`._config`) read them, and the modules that parse them or advise about them
name them in their messages. Imports nothing.
"""

TRUSTED_KEYS_VAR = "FLASHHUB_TRUSTED_KEYS"
REQUIRE_SIGNATURES_VAR = "FLASHHUB_REQUIRE_SIGNATURES"
LOCAL_KERNELS_VAR = "LOCAL_KERNELS"
