"""The Hugging Face Hub: reading kernels from it, and republishing them into a CDN tree."""
