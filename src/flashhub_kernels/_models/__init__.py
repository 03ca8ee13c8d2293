"""Records and pure parsing, no I/O: names, the CDN's documents, a kernel's metadata."""
