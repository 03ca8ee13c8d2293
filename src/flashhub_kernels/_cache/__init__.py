"""The on-disk cache: its layout, the warm lookup, staging and commit, locks and upkeep."""
