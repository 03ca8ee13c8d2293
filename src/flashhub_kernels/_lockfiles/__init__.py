"""Lock files: their format, locking a project's kernels, fetching and loading what a lock pins."""
