"""The Hugging Face kernels API level this client implements. Imports nothing.

A kernel's ``metadata.json`` may ask for a minimum Hugging Face kernels version
(``kernels-minver``); this client loads the kernel when that is at most
:data:`HF_KERNELS_API`, the version whose behaviour it follows.
"""

HF_KERNELS_API = "0.17.2"
