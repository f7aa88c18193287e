"""The bad-input corpus through the real command line, one file per command: one `error:` line, exit 2."""
