"""Build variants: their names, this system, which build fits it, and the GPU's arch."""
