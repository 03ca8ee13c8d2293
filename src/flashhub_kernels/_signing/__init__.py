"""Signatures over the CDN's documents: statements, .sig files, keys, trusted keys."""
