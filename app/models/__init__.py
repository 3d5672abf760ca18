"""Resolve model names to something loadable: packaged defaults, local directories or hub ids."""
