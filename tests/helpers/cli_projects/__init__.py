"""LightningCLI scripts written the way real projects write them, with this package's imports.

Each module is a small, complete project (model, data, a `LightningCLI` subclass) plus a
`main(argv, run=True)` that builds its CLI as the script's `if __name__ == "__main__":` would,
with `argv` as the command line. tests/config/test_cli_real_projects.py loads each twice
(`tests.helpers.lightning_projects.load_file`: as written, and with only the import lines
rewritten to Lightning's), runs both in one process and compares them. Each file's header
names the public projects whose forms it reproduces.
"""
