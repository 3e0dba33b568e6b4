"""The subcommands of `nnsmith-cov` that belong to no one package: one module each, with
`add_parser(subparsers)` and `main(args) -> int` (cli.py lists them)."""
