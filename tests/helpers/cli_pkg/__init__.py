"""A small user package for the config and CLI tests (copied to a temporary folder for subprocess runs)."""
