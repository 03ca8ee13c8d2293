"""What the tests share that is not a fixture: the loopback CDN server (``cdn_server``),
a loopback Hugging Face Hub (``hub_server``), trees and builds to publish (``trees``,
``builds``, ``projects``), simulated machines (``machines``) and the in-process
``flashhub`` command (``cli_runner``). Fixtures are in ``conftest.py``."""
