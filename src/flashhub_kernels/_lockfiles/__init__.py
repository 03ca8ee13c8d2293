"""Lock files: their format, locking a project's kernels, loading what a lock pins."""
