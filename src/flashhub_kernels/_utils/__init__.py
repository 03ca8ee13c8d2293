"""Small helpers with no concern of their own: text, URLs, callers, files, pyproject, threads."""
