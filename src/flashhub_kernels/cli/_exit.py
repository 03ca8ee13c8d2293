"""The exit codes of the ``flashhub`` commands. A module of its own, importing nothing:
the entry point reads :data:`EXIT_INTERRUPTED` before it imports the command line."""

EXIT_OK = 0
EXIT_FAILURE = 1  # an error, printed with its hint and no traceback, or a check that failed
EXIT_USAGE = 2  # a malformed argument or setting (a ConfigError)
# 128 + the signal, as a shell reports a command the signal ended.
EXIT_INTERRUPTED = 130  # SIGINT: Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM: docker stop, Kubernetes
EXIT_BROKEN_PIPE = 141  # SIGPIPE: the reader of stdout went away (`flashhub ... | head`)
