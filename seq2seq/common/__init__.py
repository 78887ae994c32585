"""What every floor uses: specs and registries, atomic files and the workdir lock, the terminal.

Imports nothing else of the package."""
