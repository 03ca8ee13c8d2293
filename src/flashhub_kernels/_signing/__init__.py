"""Signatures over the CDN's documents: statements, .sig files, verification and keys."""
