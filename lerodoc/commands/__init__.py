"""One thin module per subcommand: parse arguments, call the core, render the result."""
