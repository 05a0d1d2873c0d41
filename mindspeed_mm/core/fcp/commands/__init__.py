"""Sub-commands of the `fcp` command line; `cli.COMMAND_MODULES` lists them."""
