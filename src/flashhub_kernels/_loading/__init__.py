"""The documented functions that load kernels: the API, local directories, offline answers."""
