"""The cold path: the CDN's documents and files fetched from its mirrors and verified."""
