"""The `ferrymq` command."""
