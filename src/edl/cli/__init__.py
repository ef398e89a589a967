"""The `edl` command line: one click group, one module per subcommand."""
